#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import Foundation
import CampaignHTTP2
import CampaignIO
import CampaignTLS
import SendJournal
import GatewayClient
import SendEngine

/// One HTTP/2 connection to APNs, on its own thread: the HTTP/2 protocol
/// around a ``ConnectionEngine`` (which takes work from the queue every
/// connection shares, dials, reads, writes, waits and journals write-ahead).
/// This file submits requests into the session and frames them into the
/// engine's outbound bytes; the answers' meaning is in
/// `H2ConnectionWorker+Answers.swift`, silence and losses in `+Losses`.
///
/// Every notification is a stream, and every stream gets an answer, so
/// nothing waits for a proof: each outcome is final when it arrives (issue
/// 15's table, ``H2Answer``). What never got an answer is sent again: exactly
/// when the server said it never processed it (REFUSED_STREAM, or above a
/// GOAWAY's last stream), and counted as a possible duplicate when the
/// connection was lost with it open.
package final class H2ConnectionWorker: GatewayConnectionWorker, @unchecked Sendable {
    /// A notification on its way: its bytes as the transport encoded them.
    package struct Item {
        package var seq: UInt64
        package var shard: Int32
        package var ordinal: Int32
        package var bytes: [UInt8]
        /// A scheduled notification's moment (its expiry counts from it), or 0.
        package var moment: Int64 = 0
        /// Quiet hours: its device's zone (``ZoneRegistry``), or -1.
        package var zone: Int32 = -1
        /// Answers that asked for a retry (429, 5xx, refused streams) so far: the backoff's exponent.
        package var retries = 0
        /// Connections lost (or streams reset) while it was open: it may have been processed each time.
        package var losses = 0
        /// Whether it has been counted as a possible duplicate (once, however often it is lost).
        package var risked = false
        /// When it was last submitted (for the answer timeout).
        package var sentAt: UInt64 = 0
        package var token: ArraySlice<UInt8> { bytes[H2QueuedRequest.tokenRange(bytes)] }
        /// Where the collapse id's length is; the id follows it, then the payload.
        package var collapseAt: Int { H2QueuedRequest.tokenRange(bytes).upperBound }
        package var payloadStart: Int { collapseAt + 1 + Int(bytes[collapseAt]) }
        /// As the queue held it (for the release rule's second asking).
        package var frame: QueuedFrame { QueuedFrame(seq: seq, shard: shard, ordinal: ordinal, start: 0, count: bytes.count, moment: moment, zone: zone) }
    }


    package let engine: ConnectionEngine
    package let fields: RequestFields
    /// Token authentication, or nil with a certificate.
    package let auth: TokenAuthorization?
    /// The send's refusals as malformed, held by all its connections together.
    package let malformed: MalformedRefusals
    package var shared: SendShared { engine.shared }
    package var settings: SendSettings { engine.settings }

    package var ready: [Item] = []
    package var readyHead = 0
    package var waiting: [(due: UInt64, item: Item)] = []
    package var inFlight: [Int32: Item] = [:]
    /// The connection's own state (``H2ConnectionState``).
    package var connectionState = H2ConnectionState.closed
    /// A stop's grace ran out with requests unanswered (left for the resume).
    package var leftUnanswered = false
    /// The connection closing achieved nothing (set by ``closing()``, for ``closed()``).
    package var closedFruitless = false
    /// Notifications just parked (lost too often), for one log line (``logParked()``).
    package var parkedNotLogged: [UInt64] = []
    package let idHash: UInt64
    package var answers = ProofOutcome()
    package var frames: [UInt8] = []
    package var taken: [(QueuedFrame, Int)] = []
    /// What this connection tells the pool (``PoolSizer``); published every
    /// ``gaugeNanoseconds`` and when the connection closes.
    package let gauge: ConnectionGauge? = ConnectionGauge()
    package var tally = ConnectionGauge.Tally()
    package var tallyPublishedAt: UInt64 = 0
    /// This thread's CPU nanoseconds at the last publication.
    package var threadCPUPublished: UInt64 = 0
    package static let gaugeNanoseconds: UInt64 = 250_000_000
    /// The shortest PING round trip on this connection (see ``ConnectionGauge/Tally/pingRoundTrip``).
    package var pingRoundTrip: UInt64?

    package init(engine: ConnectionEngine, fields: RequestFields, tokens: ProviderTokenSource?, malformed: MalformedRefusals) {
        self.engine = engine
        self.fields = fields
        auth = tokens.map { TokenAuthorization(source: $0, clock: engine.clock) }
        self.malformed = malformed
        idHash = NotificationID.hash(planChecksum: fields.planIdentity)
    }

    package var now: UInt64 { engine.now }
    package var readyCount: Int { ready.count - readyHead }
    package var hasWork: Bool { !shared.isStopping && (readyCount > 0 || (!engine.isRetiring && !engine.queueEmpty)) }

    package func retire() { engine.retire() }

    // MARK: - The engine's turns

    package var nextRetryDue: UInt64? { waiting.map(\.due).min() }

    package func beginTurn() -> Bool {
        let t = now
        while let i = waiting.firstIndex(where: { $0.due <= t }) { ready.append(waiting.remove(at: i).item) }
        let idle = !hasWork && inFlight.isEmpty
        if idle && (shared.isStopping || ((engine.inputFinished || engine.isRetiring) && waiting.isEmpty)) { return false }
        if shared.isStopping { cancelUnsent() }
        if shared.isStopping && shared.stopGraceIsOver {
            // What is still open stays pending for the resume: a server
            // that never answers must not hold a stop for ever.
            if !inFlight.isEmpty {
                engine.log("\(inFlight.count) request\(inFlight.count == 1 ? "" : "s") still unanswered \(Int(SendShared.stopGraceSeconds)) s after the stop; left for --resume")
                riskAll(splitByBody(inFlight).sent)
                inFlight.removeAll()
                leftUnanswered = true
            }
            return false
        }
        return true
    }

    /// Submits what may go, and frames it into the engine's outbound bytes.
    package func frame() -> WireVerdict {
        submitRequests()
        guard let session else { return .keep }
        do throws(H2Error) {
            try engine.withOutbound { out throws(H2Error) in try session.send(into: &out) }
        } catch {
            engine.log("\(error); reconnecting")
            connectionLost()
            return .lost
        }
        return .keep
    }

    package func end() -> Bool {
        // Nothing left unanswered on it: a clean close (a stop's grace that ran out is not).
        let clean = inFlight.isEmpty && !leftUnanswered
        if !inFlight.isEmpty { riskAll(splitByBody(inFlight).sent) }
        flushAnswers()
        return clean
    }

    package func closing() {
        closedFruitless = !productive && !shared.isStopping
        publishGauge(at: now)   // what it measured, even in its first quarter second
        flushAnswers()
        dropSession()
    }

    package func closed() -> AfterClose {
        guard closedFruitless else { return .dial }
        // Nothing accepted or finally refused on it (GOAWAY 0, floods,
        // resets, protocol errors): past a run of these the send ends
        // (69, resumable), and the next connection waits a growing pause.
        _ = shared.connectionWasFruitless()
        shared.serverTrouble("a connection that achieved nothing", limitSeconds: settings.outageLimitSeconds)
        return .backOff
    }

    package func opened(_ link: ConnectionLink) -> Bool {
        guard link.negotiatedProtocol == "h2" else {
            shared.fail(.credentialRefused("\(settings.gatewayHost):\(settings.gatewayPort) does not speak HTTP/2 (it did not agree to ALPN h2): is it the HTTP/2 provider API (api.push.apple.com:443), or a binary-interface gateway for a plan of another format?"))
            return false
        }
        let session: H2Session
        do {
            // No server push; a large window, so answers never wait for ours.
            session = try H2Session(role: .client, settings: [(id: 2, value: 0), (id: 4, value: 1 << 20)])
        } catch {
            engine.log("\(error)")
            return false
        }
        session.keptHeaders = [Array(":status".utf8), Array("retry-after".utf8)] + fields.target.keptAnswerHeaders
        session.maxHeaderBytes = Self.maxAnswerHeaderBytes
        session.maxBodyBytes = Self.maxAnswerBodyBytes
        connectionState = .open(H2OpenConnection(session: session, token: auth?.tokenForNewConnection(), openedAt: now))
        return true
    }

    // MARK: - Requests

    /// Apple's answers carry a few hundred bytes of header fields and a JSON
    /// body of a reason and a timestamp; far more is not APNs, and reading it
    /// all would let a server hold the connection's thread.
    package static let maxAnswerHeaderBytes = 64 << 10
    package static let maxAnswerBodyBytes = 64 << 10

    /// Body bytes submitted beyond what the window allows now: enough that
    /// a WINDOW_UPDATE finds work ready to go.
    package static let unsentBodySlack = 16_384

    /// The bodies waiting for the server's window are as many as it may hold
    /// (see ``unsentBodySlack``): no more requests now.
    package func windowIsFull(_ session: H2Session) -> Bool {
        session.unsentBodyBytes >= max(0, session.remoteWindow) + Self.unsentBodySlack
    }

    package func submitRequests() {
        guard let session, open?.machine.mayStartStreams(at: now) == true, !shared.isStopping else { return }
        if open?.template == nil {
            let made = makeTemplate()
            withOpen { $0.template = made }
        }
        guard let template = open?.template else { return }
        let limit = streamLimit(session)
        // No more requests than the server's window can soon carry: from far
        // away their bodies would only wait here (hoarded from the other
        // connections, and kept from the answer timeout's clock).
        while inFlight.count < limit, !windowIsFull(session) {
            if readyCount == 0 && engine.isRetiring { break }   // no new work: what it holds, then it ends
            if let rate = engine.rate, !rate.take() { break }
            if readyCount == 0 {
                let want = engine.rate != nil ? 1 : limit - inFlight.count
                frames.removeAll(keepingCapacity: true)
                taken.removeAll(keepingCapacity: true)
                // No more than the window can carry now (at least one): what
                // a connection takes and cannot send waits here, one window a
                // round trip, while the others run dry (from far away, the
                // last second of a send was one connection's hoard).
                let room = max(0, session.remoteWindow - session.unsentBodyBytes) + Self.unsentBodySlack
                let n = engine.take(maxBytes: room, maxFrames: want, into: &frames) { frame, offset in
                    taken.append((frame, offset))
                }
                for (frame, offset) in taken {
                    ready.append(Item(seq: frame.seq, shard: frame.shard, ordinal: frame.ordinal,
                                      bytes: Array(frames[offset..<(offset + frame.count)]), moment: frame.moment, zone: frame.zone))
                }
                if n == 0 { break }
            }
            var item = ready[readyHead]
            item.sentAt = now
            readyHead += 1
            if readyHead > 4096, readyHead * 2 > ready.count { ready.removeFirst(readyHead); readyHead = 0 }
            // A retry is asked the schedule's verdict again, as its first try was when taken.
            if item.retries + item.losses > 0, item.moment != 0,
               !item.bytes.withUnsafeBufferPointer({ engine.mayGoAgain(item.frame, packet: $0) }) { continue }
            do throws(H2Error) {
                let tokenRange = H2QueuedRequest.tokenRange(item.bytes)
                let collapseAt = item.collapseAt, slots = templateSlots
                let expiry = fields.expiryPerRecord ? fields.header.expiry(forMoment: item.moment == 0 ? nil : item.moment, sentAt: Int64(engine.clock.wallSeconds)) : 0
                let stream = try item.bytes.withUnsafeBufferPointer { bytes throws(H2Error) in
                    try session.submitRequest(template, body: item.bytes, bodyStart: item.payloadStart) { slot, room in
                        switch slots[slot] {
                        case .path:
                            let prefix: StaticString = "/3/device/"
                            room.baseAddress!.update(from: prefix.utf8Start, count: prefix.utf8CodeUnitCount)
                            HexEncoding.write(UnsafeBufferPointer(rebasing: bytes[tokenRange]),
                                              to: room.baseAddress! + prefix.utf8CodeUnitCount)
                            return prefix.utf8CodeUnitCount + 2 * tokenRange.count
                        case .expiration:
                            return Self.writeDecimal(UInt64(expiry), to: room)
                        case .collapseId:
                            let n = Int(bytes[collapseAt])
                            room.baseAddress!.update(from: bytes.baseAddress! + collapseAt + 1, count: min(n, room.count))
                            return n
                        case .id:
                            NotificationID.write(hash: idHash, seq: item.seq, to: room.baseAddress!)
                            return 36
                        case .channel:
                            return Base64.write(UnsafeBufferPointer(rebasing: bytes[tokenRange]), to: room)
                        }
                    }
                }
                inFlight[stream] = item
                engine.handed(shard: item.shard, ordinal: item.ordinal)
            } catch {
                // The session will start no more streams (GOAWAY): this one goes on the next connection.
                readyHead -= 1
                ready[readyHead] = item
                withOpen { $0.machine.goAway() }
                break
            }
        }
        if readyHead == ready.count { ready.removeAll(keepingCapacity: true); readyHead = 0 }
    }

    /// Streams this connection may have open: `--streams`, never above the
    /// server's limit; until its SETTINGS arrive, at most 100 (RFC 9113's
    /// floor), and on a token connection one until a request succeeds, as
    /// Apple holds it (more would only be refused).
    package func streamLimit(_ session: H2Session) -> Int {
        let server = Int(min(session.remoteMaxConcurrentStreams, UInt32(Int32.max)))
        if auth != nil && !acceptedOnConnection { return TokenAuthorization.streamsBeforeFirstSuccess }
        return open?.machine.streamLimit(server: server, wanted: settings.streams) ?? 0
    }

    // MARK: - What the engine read and wrote

    /// Requests are coalesced into writes as on the binary interface: a
    /// write when --batch-bytes are waiting, --batch-delay-ms after the
    /// first of them, or at once when nothing more can join them (the queue
    /// has nothing now, or the stream limit or the window is reached) or
    /// the connection is ending.
    package var moreCanJoin: Bool {
        guard let session else { return false }
        return !goingAway && !shared.isStopping && open?.machine.pingInFlight == false && !engine.inputFinished
            && (readyCount > 0 || !engine.queueEmpty) && inFlight.count < streamLimit(session) && !windowIsFull(session)
    }

    package var watchesQueue: Bool {
        guard let session else { return false }
        return !goingAway && !engine.inputFinished && !engine.isRetiring && engine.queueEmpty && readyCount == 0 && inFlight.count < streamLimit(session)
    }

    package var nextWakeUp: UInt64? {
        let t = now
        var wake = [nextRetryDue, open?.machine.pauseEnds(after: t)].compactMap { $0 }.min()
        if let session, !watchesQueue, readyCount > 0, !goingAway, !shared.isStopping, inFlight.count < settings.streams,
           engine.rate == nil, !windowIsFull(session) {
            wake = min(wake ?? t, t)   // waiting on the server's stream limit: its answers wake the socket
        }
        return wake
    }

    package func waited(since: UInt64) {
        guard let session else { return }
        account(heldBack(session), since: since)
    }

    package func received(_ bytes: ArraySlice<UInt8>) -> WireVerdict {
        guard let session else { return .lost }
        do { try bytes.withUnsafeBytes { try session.receive($0) } } catch {
            engine.log("\(error); reconnecting")
            handle(session.drainEvents())
            connectionLost()
            return .lost
        }
        handle(session.drainEvents())
        return .keep
    }

    package func lost() {
        if let session { handle(session.drainEvents()) }
        connectionLost()
    }

    package func lostSilently() { connectionLost() }

    /// Nothing is replayed from bytes written: a request goes again as a new stream.
    package func wroteAll() -> Bool { true }

    package func checkTimers() -> WireVerdict {
        flushAnswers()
        guard let session, engine.isConnected else { return .keep }
        let after = now
        if let silence = answerTimeout(session, at: after) { return .silent(silence) }
        let timers = withOpen { $0.machine.timers(at: after, requestsOpen: !inFlight.isEmpty, lastReadAt: engine.lastReadAt,
                                                  pingAfterSeconds: settings.pingAfterSeconds) } ?? .none
        switch timers {
        case .none:
            break
        case .sendPing:
            session.submitPing()
        case .silent(let seconds):
            return .silent("no answer to a PING, nor anything else, within \(String(format: "%.1f", seconds)) s")
        }
        if goingAway, inFlight.isEmpty, engine.written == engine.outbound.count {
            return .close   // every answer in: the next connection takes over
        } else if !session.isActive {
            connectionLost()
            return .lost
        }
        return .keep
    }
}
