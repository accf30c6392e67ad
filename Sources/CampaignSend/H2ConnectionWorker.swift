#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import Foundation
import CampaignHTTP2
import CampaignIO
import CampaignTLS

/// One HTTP/2 connection to APNs and the shards it owns, on its own thread:
/// the HTTP/2 half of ``NotificationTransport``.
///
/// Every notification is a stream, and every stream gets an answer, so
/// nothing waits for a proof: each outcome is final when it arrives (issue
/// 15's table, ``H2Answer``). What never got an answer is sent again: exactly
/// when the server said it never processed it (REFUSED_STREAM, or above a
/// GOAWAY's last stream), and counted as a possible duplicate when the
/// connection was lost with it open.
final class H2ConnectionWorker: GatewayConnectionWorker, @unchecked Sendable {
    /// A notification on its way: its bytes as the transport encoded them.
    struct Item {
        var seq: UInt64
        var shard: Int32
        var ordinal: Int32
        var bytes: [UInt8]
        /// Answers that asked for a retry (429, 5xx, refused streams) so far: the backoff's exponent.
        var retries = 0
        /// Connections lost (or streams reset) while it was open: it may have been processed each time.
        var losses = 0
        /// Whether it has been counted as a possible duplicate (once, however often it is lost).
        var risked = false
        /// When it was last submitted (for the answer timeout).
        var sentAt: UInt64 = 0
        var token: ArraySlice<UInt8> { bytes[1..<(1 + Int(bytes[0]))] }
        /// Where the collapse id's length is; the id follows it, then the payload.
        var collapseAt: Int { 1 + Int(bytes[0]) }
        var payloadStart: Int { collapseAt + 1 + Int(bytes[collapseAt]) }
    }


    let index: Int
    let queue: WorkQueue
    let shared: SendShared
    let settings: SendSettings
    let fields: RequestFields
    let tokens: ProviderTokenSource?
    private let dialer: GatewayDialer
    private var bucket: SharedRate? { shared.rate }
    private var marks: SentMarks
    private var queueEmpty = false
    private var inputFinished = false

    private var ready: [Item] = []
    private var readyHead = 0
    private var waiting: [(due: UInt64, item: Item)] = []
    private var inFlight: [Int32: Item] = [:]
    private var connection: TLSConnection?
    private var session: H2Session?
    private var connectionToken: ProviderToken? {
        didSet { template = nil }
    }
    /// Rebuilt when the token changes.
    private var template: RequestTemplate?
    private let idHash: UInt64
    private var out: [UInt8] = []
    private var written = 0
    private var goingAway = false
    /// When the oldest unwritten frame was framed (for --batch-delay-ms).
    private var batchStartedAt: UInt64?
    private var settingsReceived = false
    private var acceptedOnConnection = false
    private var lastReadAt: UInt64 = 0
    private var pingSentAt: UInt64?
    private var silentConnections = 0
    /// Whether this connection got an answer about a notification (accepted or finally refused).
    private var productive = false
    /// No request is submitted on this connection before this (a `retry-after`).
    private var pausedUntil: UInt64 = 0
    /// Since when work has waited on a connection whose server allows no stream.
    private var stalledSince: UInt64?
    /// When in-flight requests were last checked against the answer timeout.
    private var lastAnswerCheck: UInt64 = 0
    private var answers = ProofOutcome()
    private var frames: [UInt8] = []
    private var taken: [(QueuedFrame, Int)] = []
    private var readBuffer = [UInt8](repeating: 0, count: 65_536)
    /// What this connection tells the pool (``PoolSizer``); published every
    /// ``gaugeNanoseconds`` and when the connection closes.
    let gauge: ConnectionGauge? = ConnectionGauge()
    private var tally = ConnectionGauge.Tally()
    private var tallyPublishedAt: UInt64 = 0
    static let gaugeNanoseconds: UInt64 = 250_000_000
    /// PINGs measure the round trip (from the server's SETTINGS on, once a second: 17 bytes each way).
    static let roundTripPingNanoseconds: UInt64 = 1_000_000_000
    private var lastPingAt: UInt64 = 0

    init(index: Int, queue: WorkQueue, shared: SendShared, settings: SendSettings, fields: RequestFields, shards: Int, tokens: ProviderTokenSource?) {
        self.index = index
        self.queue = queue
        self.shared = shared
        self.settings = settings
        self.fields = fields
        self.tokens = tokens
        marks = SentMarks(shards: shards)
        idHash = NotificationID.hash(planChecksum: fields.planIdentity)
        dialer = GatewayDialer(settings: settings, shared: shared)
        queue.join()
    }

    private var now: UInt64 { Deadline.now().nanoseconds }
    private var readyCount: Int { ready.count - readyHead }
    private var hasWork: Bool { !shared.isStopping && (readyCount > 0 || !queueEmpty) }

    // MARK: - Main loop

    func run() {
        while !shared.cancellation.isCancelled {
            let t = now
            while let i = waiting.firstIndex(where: { $0.due <= t }) { ready.append(waiting.remove(at: i).item) }
            if connection == nil {
                let state = queue.state
                queueEmpty = state.empty
                inputFinished = inputFinished || state.finished
            }
            let idle = !hasWork && inFlight.isEmpty
            if idle && (shared.isStopping || (inputFinished && waiting.isEmpty)) { break }
            if shared.isStopping { cancelUnsent() }
            if shared.isStopping && shared.stopGraceIsOver {
                // What is still open stays pending for the resume: a server
                // that never answers must not hold a stop for ever.
                if !inFlight.isEmpty {
                    shared.log("connection \(index + 1): \(inFlight.count) request\(inFlight.count == 1 ? "" : "s") still unanswered \(Int(SendShared.stopGraceSeconds)) s after the stop; left for --resume")
                    riskAll(splitByBody(inFlight).sent)
                    inFlight.removeAll()
                }
                break
            }
            if connection == nil {
                if !hasWork {
                    // Nothing to send now: the next retry's time, or new frames.
                    if let due = waiting.map(\.due).min() {
                        _ = sleep(until: .after(seconds: Double(due - min(due, now)) / 1e9), cancellation: shared.halt)
                    } else {
                        queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt])
                    }
                    continue
                }
                guard open() else { if shared.isFinished { break } else { continue } }
            }
            submitRequests()
            pump()
        }
        if let connection { inFlight.isEmpty ? connection.close() : connection.abort() }
        if !inFlight.isEmpty { riskAll(splitByBody(inFlight).sent) }
        connection = nil
        flushAnswers()
        dialer.dropSpare()
        queue.leave()
        shared.workerFinished(sentBelow: marks.map)
    }

    private func open() -> Bool {
        guard let c = dialer.connect() else { return false }
        guard c.negotiatedProtocol == "h2" else {
            c.abort()
            shared.fail(.credentialRefused("\(settings.gatewayHost):\(settings.gatewayPort) does not speak HTTP/2 (it did not agree to ALPN h2): is it the HTTP/2 provider API (api.push.apple.com:443), or a binary-interface gateway for a plan of another format?"))
            return false
        }
        do {
            // No server push; a large window, so answers never wait for ours.
            session = try H2Session(role: .client, settings: [(id: 2, value: 0), (id: 4, value: 1 << 20)])
            session!.keptHeaders = [Array(":status".utf8), Array("retry-after".utf8)]
        } catch {
            c.abort()
            shared.log("connection \(index + 1): \(error)")
            return false
        }
        session!.maxHeaderBytes = Self.maxAnswerHeaderBytes
        session!.maxBodyBytes = Self.maxAnswerBodyBytes
        connection = c
        connectionToken = tokens?.current()
        goingAway = false
        settingsReceived = false
        acceptedOnConnection = false
        productive = false
        stalledSince = nil
        lastAnswerCheck = now
        out.removeAll(keepingCapacity: true)
        written = 0
        batchStartedAt = nil
        lastReadAt = now
        pingSentAt = nil
        return true
    }

    // MARK: - Requests

    /// Apple's answers carry a few hundred bytes of header fields and a JSON
    /// body of a reason and a timestamp; far more is not APNs, and reading it
    /// all would let a server hold the connection's thread.
    static let maxAnswerHeaderBytes = 64 << 10
    static let maxAnswerBodyBytes = 64 << 10

    /// Body bytes submitted beyond what the window allows now: enough that
    /// a WINDOW_UPDATE finds work ready to go.
    static let unsentBodySlack = 16_384

    private func submitRequests() {
        guard let session, !goingAway, !shared.isStopping, now >= pausedUntil else { return }
        if template == nil { template = makeTemplate() }
        let limit = streamLimit(session)
        // No more requests than the server's window can soon carry: from far
        // away their bodies would only wait here (hoarded from the other
        // connections, and kept from the answer timeout's clock).
        while inFlight.count < limit, session.unsentBodyBytes < max(0, session.remoteWindow) + Self.unsentBodySlack {
            if let bucket, !bucket.take() { break }
            if readyCount == 0 {
                let want = bucket != nil ? 1 : limit - inFlight.count
                frames.removeAll(keepingCapacity: true)
                taken.removeAll(keepingCapacity: true)
                let (n, finished) = queue.take(maxBytes: 1 << 20, maxFrames: want, into: &frames) { frame, offset in
                    taken.append((frame, offset))
                }
                for (frame, offset) in taken {
                    ready.append(Item(seq: frame.seq, shard: frame.shard, ordinal: frame.ordinal,
                                      bytes: Array(frames[offset..<(offset + frame.count)])))
                }
                if finished { inputFinished = true }
                queueEmpty = n == 0 || queue.isEmpty
                if n == 0 { break }
            }
            var item = ready[readyHead]
            item.sentAt = now
            readyHead += 1
            if readyHead > 4096, readyHead * 2 > ready.count { ready.removeFirst(readyHead); readyHead = 0 }
            do throws(H2Error) {
                let tokenCount = Int(item.bytes[0])
                let collapseAt = item.collapseAt, collapsePerRecord = fields.collapsePerRecord
                let stream = try item.bytes.withUnsafeBufferPointer { bytes throws(H2Error) in
                    try session.submitRequest(template!, body: item.bytes, bodyStart: item.payloadStart) { slot, room in
                        if slot == 1 && collapsePerRecord {   // apns-collapse-id
                            let n = Int(bytes[collapseAt])
                            room.baseAddress!.update(from: bytes.baseAddress! + collapseAt + 1, count: min(n, room.count))
                            return n
                        }
                        if slot == 0 {   // :path
                            let prefix: StaticString = "/3/device/"
                            room.baseAddress!.update(from: prefix.utf8Start, count: prefix.utf8CodeUnitCount)
                            HexEncoding.write(UnsafeBufferPointer(rebasing: bytes[1..<(1 + tokenCount)]),
                                              to: room.baseAddress! + prefix.utf8CodeUnitCount)
                            return prefix.utf8CodeUnitCount + 2 * tokenCount
                        }
                        NotificationID.write(hash: idHash, seq: item.seq, to: room.baseAddress!)   // apns-id
                        return 36
                    }
                }
                inFlight[stream] = item
                marks.handed(shard: item.shard, ordinal: item.ordinal)
            } catch {
                // The session will start no more streams (GOAWAY): this one goes on the next connection.
                readyHead -= 1
                ready[readyHead] = item
                goingAway = true
                break
            }
        }
        if readyHead == ready.count { ready.removeAll(keepingCapacity: true); readyHead = 0 }
    }

    /// Streams this connection may have open: `--streams`, never above the
    /// server's limit; until its SETTINGS arrive, at most 100 (RFC 9113's
    /// floor), and on a token connection one until a request succeeds, as
    /// Apple holds it (more would only be refused).
    private func streamLimit(_ session: H2Session) -> Int {
        let server = Int(min(session.remoteMaxConcurrentStreams, UInt32(Int32.max)))
        if tokens != nil && !acceptedOnConnection { return 1 }
        return min(settings.streams, settingsReceived ? server : min(server, 100))
    }

    /// The request fields of this connection: the plan's, the token's, and
    /// two that change per request (`:path` and `apns-id`, never indexed).
    private func makeTemplate() -> RequestTemplate {
        var f: [(name: String, value: String?, room: Int)] = [(":method", "POST", 0), (":scheme", "https", 0), (":path", nil, 10 + 200),
                                                              (":authority", settings.gatewayHost, 0)]
        for (name, value) in fields.common { f.append((name, value, 0)) }
        if fields.collapsePerRecord { f.append(("apns-collapse-id", nil, 64)) }   // slot 1
        f.append(("apns-id", nil, 36))
        if let connectionToken { f.append(("authorization", "bearer " + connectionToken.text, 0)) }
        return RequestTemplate(f)
    }

    // MARK: - I/O

    private func pump() {
        guard let connection, let session else { return }
        do throws(H2Error) { try session.send(into: &out) } catch {
            shared.log("connection \(index + 1): \(error); reconnecting")
            connectionLost()
            return
        }
        if written < out.count, !marks.unmarked.isEmpty {
            // Write-ahead, as for the binary interface: the journal learns what
            // may reach the gateway before it can.
            shared.markSent(shards: marks.unmarked, below: marks.below)
            marks.markedAll()
        }
        // Frames are coalesced into writes as on the binary interface: a
        // write when --batch-bytes are waiting, --batch-delay-ms after the
        // first of them, or at once when nothing more can join them (the
        // queue has nothing now, or the stream limit is reached) or the
        // connection is ending.
        let t = now
        var writeDue: UInt64? = nil
        if written < out.count {
            if batchStartedAt == nil { batchStartedAt = t }
            let due = batchStartedAt! + UInt64(settings.batchDelayMilliseconds) * 1_000_000
            let moreCanJoin = !goingAway && !shared.isStopping && pingSentAt == nil && !inputFinished
                && (readyCount > 0 || !queueEmpty) && inFlight.count < streamLimit(session)
                && session.unsentBodyBytes < max(0, session.remoteWindow) + Self.unsentBodySlack   // (the window is full)
            if out.count - written >= settings.batchBytes || !moreCanJoin || t >= due {
                guard (try? connection.writeAvailable(out, from: &written)) == true else { connectionLost(); return }
                if written == out.count { out.removeAll(keepingCapacity: true); written = 0; batchStartedAt = nil }
            } else {
                writeDue = due
            }
        }
        var timeout: Int32 = 1000
        if let writeDue { timeout = Int32(max(0, min(1000, (Int64(writeDue) - Int64(t)) / 1_000_000 + 1))) }
        if let due = waiting.map(\.due).min() { timeout = min(timeout, Int32(max(0, min(1000, (Int64(due) - Int64(t)) / 1_000_000 + 1)))) }
        if pausedUntil > t { timeout = min(timeout, Int32(max(0, min(1000, (Int64(pausedUntil) - Int64(t)) / 1_000_000 + 1)))) }
        if bucket != nil && hasWork { timeout = min(timeout, 5) }
        let canTakeMore = !goingAway && !inputFinished && queueEmpty && readyCount == 0 && inFlight.count < streamLimit(session)
        var fds = [pollfd(fd: connection.socket.fd, events: Int16(POLLIN) | (written < out.count && writeDue == nil ? Int16(POLLOUT) : 0), revents: 0),
                   pollfd(fd: shared.cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: shared.isStopping ? -1 : shared.halt.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0)]
        var watchQueue = canTakeMore
        if watchQueue && !queue.prepareToSleep() {
            watchQueue = false
            queueEmpty = false
            timeout = 0
        }
        if !canTakeMore, readyCount > 0, !goingAway, !shared.isStopping, inFlight.count < settings.streams, bucket == nil {
            timeout = min(timeout, 1)   // waiting on the server's stream limit: its answers wake the socket
        }
        let bound = heldBack(session)
        let before = now
        _ = poll(&fds, watchQueue ? 4 : 3, timeout)
        account(bound, since: before)
        if fds[0].revents != 0 { readAnswers() }
        flushAnswers()
        guard self.connection != nil else { return }
        let after = now
        if checkAnswerTimeout(session, at: after) { return }
        if settingsReceived, pingSentAt == nil, after - lastPingAt >= Self.roundTripPingNanoseconds {
            session.submitPing()
            pingSentAt = after
            lastPingAt = after
        }
        if !inFlight.isEmpty {
            let pingTimeout = min(10, settings.pingAfterSeconds / 3)
            if let sent = pingSentAt {
                if Double(after - sent) / 1e9 > pingTimeout { silent("no answer to a PING within \(String(format: "%.1f", pingTimeout)) s") }
            } else if Double(after - lastReadAt) / 1e9 > settings.pingAfterSeconds {
                session.submitPing()
                pingSentAt = after
            }
        }
        if self.connection != nil, goingAway, inFlight.isEmpty, written == out.count {
            silentConnections = 0
            closeConnection(abort: false)   // every answer in: the next connection takes over
        } else if self.connection != nil, !session.isActive {
            connectionLost()
        }
    }

    /// Drops the connection when a request has waited longer than the answer
    /// timeout (a server that holds streams, never grows its window, drips
    /// its answer or floods frames instead of answering), or when work has
    /// waited that long on a server that allows no stream. Checked once a second.
    private func checkAnswerTimeout(_ session: H2Session, at t: UInt64) -> Bool {
        let limit = settings.answerTimeoutSeconds
        if readyCount > 0, inFlight.isEmpty, !goingAway, !shared.isStopping, t >= pausedUntil, streamLimit(session) == 0 {
            if stalledSince == nil { stalledSince = t }
            if Double(t - stalledSince!) / 1e9 > limit {
                silent("the server has allowed no stream (SETTINGS_MAX_CONCURRENT_STREAMS 0) for \(format1(limit)) s")
                return true
            }
        } else {
            stalledSince = nil
        }
        guard !inFlight.isEmpty, t - lastAnswerCheck >= 1_000_000_000 || limit < 2 else { return false }
        lastAnswerCheck = t
        let oldest = inFlight.values.lazy.map(\.sentAt).min() ?? t
        if Double(t - min(t, oldest)) / 1e9 > limit {
            silent("a request has had no answer for \(format1(limit)) s (--answer-timeout)")
            return true
        }
        return false
    }

    /// Reads what has arrived, at most this many reads a turn, so a server
    /// that floods frames cannot keep the loop from its stop and time checks.
    static let readsPerTurn = 32

    private func readAnswers() {
        guard let connection, let session else { return }
        for _ in 0..<Self.readsPerTurn {
            let result: TLSConnection.IOResult
            do { result = try readBuffer.withUnsafeMutableBytes { try connection.tryRead(into: $0) } } catch { connectionLost(); return }
            switch result {
            case .bytes(let n):
                lastReadAt = now
                do throws(H2Error) { try session.receive(readBuffer, count: n) } catch {
                    shared.log("connection \(index + 1): \(error); reconnecting")
                    handle(session.drainEvents())
                    connectionLost()
                    return
                }
                handle(session.drainEvents())
                if self.connection == nil { return }
            case .wantRead, .wantWrite:
                return
            case .closed:
                handle(session.drainEvents())
                connectionLost()
                return
            }
        }
    }

    // MARK: - Outcomes

    private func handle(_ events: [H2Session.Event]) {
        for event in events {
            switch event {
            case .message(let stream, let headers, let body):
                guard let item = inFlight.removeValue(forKey: stream) else { continue }
                noteRoundTrip(now - min(now, item.sentAt))
                let status = headers.first { $0.name == ":status" }.flatMap { Int($0.value) } ?? 0
                answered(item, H2Answer(status: status, body: body, retryAfter: headers.first { $0.name == "retry-after" }?.value))
            case .streamClosed(let stream, let code):
                guard let item = inFlight.removeValue(forKey: stream) else { continue }
                if code == H2Session.ErrorCode.refusedStream {
                    // RFC 9113 §8.7: never processed, so sent again exactly,
                    // after a backoff (a server refusing every stream must not
                    // turn this loop into a busy one).
                    retryLater(item, afterSeconds: nil)
                    shared.serverTrouble("RST_STREAM REFUSED_STREAM", limitSeconds: settings.outageLimitSeconds)
                } else {
                    // Reset without an answer: it may have been processed, so
                    // again as a possible duplicate, after a backoff, and not
                    // in this run once it was lost this way too often.
                    shared.serverTrouble("RST_STREAM \(H2Session.ErrorCode.name(code))", limitSeconds: settings.outageLimitSeconds)
                    if let again = lost(item) { later(again, afterSeconds: nil) }
                }
            case .goAway(let last, let code):
                goingAway = true
                if code != H2Session.ErrorCode.noError {
                    shared.log("connection \(index + 1): the server is closing the connection (GOAWAY, error \(code), last stream \(last)); what it did not process goes on the next")
                }
            case .pingAcknowledged:
                if let sent = pingSentAt { noteRoundTrip(now - sent) }
                pingSentAt = nil
            case .settings:
                settingsReceived = true
            }
        }
    }

    private func answered(_ item: Item, _ answer: H2Answer) {
        switch answer.verdict {
        case .accepted:
            acceptedOnConnection = true
            becameProductive()
            answers.acceptedOrdinals[item.shard, default: []].append(Int(item.ordinal))
            answers.accepted += 1
        case .unregistered(let at):
            becameProductive()
            // A time in the future (a server's mistake) would keep the token out of every plan until then.
            let arrived = UInt32(clamping: ProviderTokenSource.now())
            fail(item, answer, unregisteredAt: min(at ?? arrived, arrived))
        case .refusedForItsToken:
            becameProductive()
            fail(item, answer)
        case .refusedAsMalformed:
            // Final only once the server shows it is sane (SendShared holds it until then).
            shared.log("connection \(index + 1): APNs refused plan record \(item.seq) with \(answer.description): a bug in the plan or in campaign; it will not be sent again")
            shared.malformedAnswer(failure(item, answer), what: answer.description)
        case .credentialRefused:
            ready.append(item)   // not final: a resume with the right credential sends it
            shared.fail(.credentialRefused(Self.sentence(for: answer, topic: fields.common.first { $0.name == "apns-topic" }?.value, tokenAuth: tokens != nil)))
        case .providerTokenExpired:
            guard let tokens, let used = connectionToken else {
                ready.append(item)
                shared.fail(.credentialRefused("APNs says the provider token expired (403 ExpiredProviderToken), but this send uses a certificate: is --gateway an APNs host?"))
                return
            }
            let renewed = tokens.expired(used)
            guard renewed.text != used.text else {
                // Renewing a token younger than 20 minutes would earn 429
                // TooManyProviderTokenUpdates, and sending it again the same 403.
                ready.append(item)
                let age = ProviderTokenSource.now() - used.issuedAt
                shared.fail(.credentialRefused("APNs says the provider token expired (403 ExpiredProviderToken), but it was made \(age / 60) min \(age % 60) s ago (APNs accepts a token for an hour): check this machine's clock (it must be within minutes of the real time), then resume."))
                return
            }
            connectionToken = renewed
            ready.append(item)
        case .tooManyTokenUpdates:
            // This connection is unusable; a new one with the same token, after a pause.
            retryLater(item, afterSeconds: nil)
            goingAway = true
            shared.serverTrouble(answer.description, limitSeconds: settings.outageLimitSeconds)
        case .retryLater(let after):
            retryLater(item, afterSeconds: after)
            // The server asked this connection to wait: it does, the others go on.
            if let after { pausedUntil = max(pausedUntil, now + UInt64(after) * 1_000_000_000) }
            shared.serverTrouble(answer.description, limitSeconds: settings.outageLimitSeconds)
        case .unknown:
            retryLater(item, afterSeconds: nil)
            shared.serverTrouble(answer.status == 0 ? "an answer without a :status" : answer.description, limitSeconds: settings.outageLimitSeconds)
        }
    }

    /// An answer asked for a retry: one more for the backoff's exponent.
    private func retryLater(_ item: Item, afterSeconds: Int?) {
        var item = item
        item.retries += 1
        later(item, afterSeconds: afterSeconds)
    }

    /// Puts `item` back after a backoff: what the server asked for, or
    /// bounded exponential backoff with jitter. Never final: the server's
    /// trouble says nothing about the notification.
    private func later(_ item: Item, afterSeconds: Int?) {
        let base = afterSeconds.map(Double.init)
            ?? min(30, 0.25 * Double(1 << min(max(item.retries, 1) - 1, 7))) * Double.random(in: 0.5...1.5)
        waiting.append((now + UInt64(base * 1e9), item))
        shared.count(resends: 1)
    }

    private func failure(_ item: Item, _ answer: H2Answer, unregisteredAt: UInt32? = nil) -> SendFailure {
        SendFailure(seq: item.seq, shard: Int(item.shard), ordinal: Int(item.ordinal), status: answer.status,
                    httpReason: answer.reason ?? "", token: Array(item.token), gaveUp: false,
                    attempts: item.retries + item.losses + 1, unregisteredAt: unregisteredAt)
    }

    private func fail(_ item: Item, _ answer: H2Answer, unregisteredAt: UInt32? = nil) {
        answers.failures.append(failure(item, answer, unregisteredAt: unregisteredAt))
    }

    private func becameProductive() {
        if !productive {
            productive = true
            dialer.productive()
        }
    }

    /// Journals the answers gathered since the last time, together.
    private func flushAnswers() {
        guard answers.accepted > 0 || !answers.failures.isEmpty else { return }
        shared.record(answers)
        answers = ProofOutcome()
    }

    /// One sentence for a refused credential: which, and what to do.
    static func sentence(for answer: H2Answer, topic: String?, tokenAuth: Bool) -> String {
        let what = "(\(answer.status) \(answer.reason ?? "no reason"))"
        switch answer.reason {
        case "BadCertificateEnvironment":
            return "APNs refused the provider certificate \(what): it is for the other environment; use --environment to match it, or the certificate for this environment."
        case "BadCertificate":
            return "APNs refused the provider certificate \(what): check --cert (and --key) is the app's APNs certificate, not expired or revoked."
        case let reason? where tokenAuth && ["InvalidProviderToken", "MissingProviderToken"].contains(reason):
            return "APNs refused the provider token \(what): check that --auth-key is the .p8 key whose id is --key-id, and --team-id is the team that owns it."
        case "InvalidProviderToken", "MissingProviderToken":
            return "APNs refused the provider certificate \(what): it wants a provider token, so the certificate was not taken as one for this app; check --cert (and --key), or send with --auth-key."
        case "TopicDisallowed", "Forbidden":
            return "APNs refused to send to topic \(topic ?? "(the certificate's)") \(what): check the job's topic is the app's bundle id and the \(tokenAuth ? "key's team" : "certificate") may send to it."
        default:
            return "APNs refused the credential \(what): check \(tokenAuth ? "--auth-key, --key-id and --team-id" : "--cert and --key") and the job's topic."
        }
    }

    // MARK: - The pool's gauge

    /// What holds this connection back while work waits: every stream the
    /// server allows is open, or its window has no room for another payload.
    private func heldBack(_ session: H2Session) -> (window: Bool, streams: Bool) {
        guard readyCount > 0 || !queueEmpty, !goingAway, !shared.isStopping else { return (false, false) }
        if session.unsentBodyBytes > 0, session.unsentBodyBytes >= session.remoteWindow { return (true, false) }
        return (false, inFlight.count >= streamLimit(session))
    }

    private func account(_ bound: (window: Bool, streams: Bool), since: UInt64) {
        let t = now
        let spent = t - min(t, since)
        tally.open += spent
        if bound.window { tally.windowBound += spent }
        if bound.streams { tally.streamBound += spent }
        if t - tallyPublishedAt >= Self.gaugeNanoseconds { publishGauge(at: t) }
    }

    private func noteRoundTrip(_ nanoseconds: UInt64) {
        tally.roundTrip = min(tally.roundTrip ?? nanoseconds, nanoseconds)
    }

    private func publishGauge(at t: UInt64) {
        tallyPublishedAt = t
        gauge?.publish(&tally, productive: productive)
    }

    // MARK: - Lost connections

    /// Three connections in a row that go silent (whatever they answered
    /// first) end the send, resumable: the gateway keeps hanging.
    private func silent(_ what: String) {
        silentConnections += 1
        shared.log("connection \(index + 1): \(what); reconnecting")
        connectionLost()
        if silentConnections >= 3 {
            shared.fail(.unreachable(TLSError(.timedOut(operation: "waiting for a gateway that stopped answering (3 connections in a row)"))))
        }
    }

    /// `item` was open when its connection or stream was lost: it may have
    /// been processed. Counted as a possible duplicate (once), and returned
    /// to send again, unless it has now been lost ``H2NotificationLimits/maxLosses``
    /// times: then it is not sent again in this run (a server that takes
    /// each request and drops the connection must not get it thousands of times).
    private func lost(_ item: Item) -> Item? {
        var item = item
        item.losses += 1
        if !item.risked {
            item.risked = true
            shared.count(duplicatesRisked: 1)
        }
        if item.losses >= H2NotificationLimits.maxLosses {
            shared.parked()
            shared.log("connection \(index + 1): plan record \(item.seq) was open on \(item.losses) lost connections; it is not sent again in this run (resume to send it)")
            return nil
        }
        return item
    }

    /// The open requests whose body has not all been framed (the server
    /// cannot have processed them), and the others, each oldest first.
    private func splitByBody(_ open: [Int32: Item]) -> (unsent: [Item], sent: [Item]) {
        var unsent: [Item] = [], sent: [Item] = []
        for (stream, item) in open {
            if session?.bodyIsUnsent(stream) == true { unsent.append(item) } else { sent.append(item) }
        }
        return (unsent.sorted { $0.seq < $1.seq }, sent.sorted { $0.seq < $1.seq })
    }

    /// Once the send stops, requests whose body has not gone out are
    /// cancelled (RST_STREAM CANCEL): the server cannot have processed them,
    /// so they stay pending for the resume, not possible duplicates, and the
    /// stop waits only for answers that can come.
    private func cancelUnsent() {
        guard let session, session.unsentBodyBytes > 0 else { return }
        for (stream, _) in inFlight where session.bodyIsUnsent(stream) {
            session.resetStream(stream, errorCode: H2Session.ErrorCode.cancel)
            inFlight[stream] = nil
        }
    }

    /// Counts what is left open at a stop as possible duplicates (once each).
    private func riskAll<S: Sequence>(_ items: S) where S.Element == Item {
        let n = items.reduce(0) { $0 + ($1.risked ? 0 : 1) }
        if n > 0 { shared.count(duplicatesRisked: n) }
    }

    /// The connection ended with streams open: they may have been processed,
    /// so they go again, counted as possible duplicates.
    private func connectionLost() {
        let (unsent, open) = splitByBody(inFlight)
        inFlight.removeAll()
        // A request whose body never all went out cannot have been processed: it goes again exactly.
        let again = (unsent + open.compactMap(lost)).sorted { $0.seq < $1.seq }
        // First on the next connection, oldest first: the longer they wait
        // behind new work, the likelier a later loss catches them open again.
        ready.insert(contentsOf: again, at: readyHead)
        if !open.isEmpty || !unsent.isEmpty {
            shared.count(resends: again.count, drops: 1)
            shared.serverTrouble("a connection lost with \(open.count) request\(open.count == 1 ? "" : "s") open", limitSeconds: settings.outageLimitSeconds)
        }
        closeConnection(abort: true)
    }

    private func closeConnection(abort: Bool) {
        if let connection { abort ? connection.abort() : connection.close() }
        let wasOpen = connection != nil
        publishGauge(at: now)
        connection = nil
        session = nil
        out.removeAll(keepingCapacity: true)
        written = 0
        batchStartedAt = nil
        goingAway = false
        pingSentAt = nil
        pausedUntil = 0
        if wasOpen && !productive && !shared.isStopping {
            // Nothing accepted or finally refused on it (GOAWAY 0, floods,
            // resets, protocol errors): past a run of these the send ends
            // (69, resumable), and the next connection waits a growing pause.
            _ = shared.connectionWasFruitless()
            shared.serverTrouble("a connection that achieved nothing", limitSeconds: settings.outageLimitSeconds)
            dialer.backOffAfterFruitlessConnection()
        }
    }
}

/// How often one notification may be lost with its connection before a
/// run stops sending it.
public enum H2NotificationLimits {
    public static let maxLosses = 3
}
