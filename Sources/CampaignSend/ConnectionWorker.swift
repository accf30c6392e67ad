#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignTLS

/// A notification written (or about to be written) on the current connection
/// and not yet proven accepted: the unproven window.
struct InFlight {
    var seq: UInt64
    var shard: Int32
    var ordinal: Int32
    var identifier: UInt32
    /// Where its frame sits in the connection's sent bytes.
    var start: Int
    var end: Int
    var attempts: UInt8
    var isSentinel: Bool
}

/// A notification to send again, with its frame as it was encoded.
struct Resend {
    var seq: UInt64
    var shard: Int32
    var ordinal: Int32
    var identifier: UInt32
    var frame: [UInt8]
    var attempts: UInt8
}

/// One gateway connection and the shards it owns, on its own thread.
///
/// Frames go into one buffer that holds everything sent since the last proof
/// of acceptance; the window lists the notifications in it. An error response
/// splits the window: before the named notification, accepted; the named one,
/// final or retried according to its status; after it, discarded by the
/// gateway and sent again, exactly. A connection lost without a response
/// leaves the whole window unproven: it is sent again (possible duplicates,
/// counted) and proofs come more often from then on.
final class ConnectionWorker: @unchecked Sendable {
    let index: Int
    let queue: WorkQueue
    let shared: SendShared
    let settings: SendSettings
    let header: WorkerHeader

    private var queueEmpty = false
    private var resends: [Resend] = []
    private var resendHead = 0
    private var inputFinished = false

    private var connection: TLSConnection?
    /// The next connection, opened while a proof is awaited on this one.
    private var spare: PendingConnection?
    private var window: [InFlight] = []
    private var unproven = 0
    private var sent: [UInt8] = []
    private var written = 0
    private var decoder = ErrorResponseDecoder()
    private var batchStartedAt: UInt64? = nil
    private var sinceProof = 0
    private var adaptiveEvery: Int? = nil
    private var sentinelOut = false
    private var sentinelWrittenAt: UInt64? = nil
    private var nextSentinel: UInt32 = 0
    private var acceptedOnConnection = 0
    private var attempts: [UInt64: UInt8] = [:]
    private var dropStrikes: [UInt64: Int] = [:]
    private var connectFailures = 0
    private var readBuffer = [UInt8](repeating: 0, count: 4096)
    /// Per shard: ordinals below this may have reached the gateway. Arrays by
    /// shard, not dictionaries: this is updated for every notification.
    private var sentBelow: [Int32]
    /// Shards whose sent mark moved since the journal last heard of it.
    private var unmarked: [Int32] = []
    private var isUnmarked: [Bool]
    private var lastWriteProgress: UInt64 = 0
    private var consecutiveStalls = 0
    private var rateAllowance: Double = 0
    private var rateUpdatedAt: UInt64 = 0

    /// Times a notification refused with status 1, 255 or an undefined code
    /// is sent again: at most 3 retries, 4 attempts in all (the README's
    /// promise; before, the third refusal ended it: only 2 retries).
    static let maxRetries: UInt8 = 3

    init(index: Int, queue: WorkQueue, shared: SendShared, settings: SendSettings, header: WorkerHeader) {
        self.index = index
        self.queue = queue
        self.shared = shared
        self.settings = settings
        self.header = header
        sentBelow = [Int32](repeating: 0, count: header.shards)
        isUnmarked = [Bool](repeating: false, count: header.shards)
        sent.reserveCapacity(settings.batchBytes * 4)
    }

    private func sentBelowMap(_ shards: [Int32]) -> [Int32: Int32] {
        var map: [Int32: Int32] = [:]
        for shard in shards where sentBelow[Int(shard)] > 0 { map[shard] = sentBelow[Int(shard)] }
        return map
    }

    private var now: UInt64 { Deadline.now().nanoseconds }

    private var hasWork: Bool {
        !shared.isStopping && (resendHead < resends.count || !queueEmpty)
    }

    // MARK: - Main loop

    func run() {
        while !shared.cancellation.isCancelled {
            if connection == nil { peekQueue() }
            // Finished, with or without a connection: the simple format never
            // gets a response that closes its last connection, so waiting for
            // one to close first kept such a send running for ever.
            if !hasWork && unproven == 0 && (inputFinished || shared.isStopping) { break }
            if connection == nil {
                if !hasWork && unproven == 0 {
                    waitForWork()
                    continue
                }
                if !connect() { if shared.isFinished { break } else { continue } }
            }
            fillBatch()
            let workLeft = hasWork || (!inputFinished && !shared.isStopping)
            if !sentinelOut, unproven > 0, header.format.reportsErrors {
                if !workLeft || sinceProof >= (proofEvery ?? Int.max) || window.count >= settings.maxWindow || shared.isStopping {
                    appendSentinel()
                }
            }
            pump(workLeft: workLeft)
        }
        // Nothing unproven (the simple format's last connection, written out):
        // a clean close, so the gateway reads every byte before the socket goes.
        if let connection { unproven == 0 ? connection.close() : connection.abort(); self.connection = nil }
        if let spare, case .success(let unused) = spare.wait() { unused.abort() }
        spare = nil
        // No one takes from the queue any more: a plan reader waiting for room must not wait for ever.
        queue.abandon()
        shared.workerFinished(sentBelow: sentBelowMap((0..<Int32(sentBelow.count)).map { $0 }))
    }

    /// Learns whether the queue has frames, without taking any.
    private func peekQueue() {
        let state = queue.state
        queueEmpty = state.empty
        if state.finished { inputFinished = true }
    }

    private func waitForWork() {
        guard queue.prepareToSleep() else { return }
        var fds = [pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: shared.cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: shared.halt.pollDescriptor, events: Int16(POLLIN), revents: 0)]
        _ = poll(&fds, 3, 1000)
    }

    // MARK: - Connecting

    private func connect() -> Bool {
        if let spare {
            self.spare = nil
            if case .success(let ready) = spare.wait() {
                connection = ready
                connectFailures = 0
                acceptedOnConnection = 0
                lastWriteProgress = now
                shared.connected()
                return true
            }
            // It failed: connect again the usual way, which counts and backs off.
        }
        do {
            connection = try TLSConnection.connect(
                host: settings.gatewayHost, port: settings.gatewayPort, context: shared.context,
                timeout: 30, cancellation: shared.halt)
            connectFailures = 0
            acceptedOnConnection = 0
            lastWriteProgress = now
            shared.connected()
            return true
        } catch {
            if error.kind == .cancelled { return false }
            if error.isCredentialOrTrustFailure {
                shared.fail(.credentials(error))
                return false
            }
            connectFailures += 1
            if connectFailures > shared.maxConnectAttempts {
                shared.fail(.unreachable(error))
                return false
            }
            // Exponential backoff with jitter: 100 ms doubling to 30 s.
            let base = min(30.0, 0.1 * Double(1 << min(connectFailures - 1, 9)))
            let delay = base * Double.random(in: 0.5...1.5)
            _ = sleep(until: .after(seconds: delay), cancellation: shared.halt)
            return false
        }
    }

    // MARK: - Framing

    /// Notifications between two proofs, when a cadence applies: the
    /// `--checkpoint-every` setting, or a tighter one after a connection was
    /// lost without an answer.
    private var proofEvery: Int? {
        guard header.format.reportsErrors else { return nil }
        return [settings.checkpointEvery > 0 ? settings.checkpointEvery : nil, adaptiveEvery].compactMap { $0 }.min()
    }

    private func fillBatch() {
        guard !sentinelOut, connection != nil else { return }
        // A batch stops where a proof is due: with batches of hundreds of
        // frames, a cadence of 64 would otherwise not be kept.
        let every = proofEvery ?? Int.max
        while sent.count - written < settings.batchBytes, window.count < settings.maxWindow, sinceProof < every, !shared.isStopping {
            if settings.rate > 0, !takeRateToken() { break }
            if resendHead < resends.count {
                let r = resends[resendHead]
                resendHead += 1
                if resendHead == resends.count { resends.removeAll(keepingCapacity: true); resendHead = 0 }
                let start = sent.count
                sent.append(contentsOf: r.frame)
                push(InFlight(seq: r.seq, shard: r.shard, ordinal: r.ordinal, identifier: r.identifier,
                              start: start, end: sent.count, attempts: r.attempts, isSentinel: false))
                continue
            }
            let room = settings.batchBytes - (sent.count - written)
            let limit = settings.rate > 0 ? 1 : min(settings.maxWindow - window.count, every - sinceProof)
            let (n, finished) = queue.take(maxBytes: room, maxFrames: limit, into: &sent) { frame, offset in
                let tries = attempts.isEmpty ? 0 : attempts[frame.seq] ?? 0
                push(InFlight(seq: frame.seq, shard: frame.shard, ordinal: frame.ordinal, identifier: UInt32(truncatingIfNeeded: frame.seq),
                              start: offset, end: offset + frame.count, attempts: tries, isSentinel: false))
            }
            if finished { inputFinished = true }
            queueEmpty = n == 0 || queue.isEmpty
            if n == 0 { break }
        }
    }

    private func push(_ entry: InFlight) {
        if batchStartedAt == nil { batchStartedAt = now }
        window.append(entry)
        unproven += 1
        sinceProof += 1
        let below = entry.ordinal + 1
        let shard = Int(entry.shard)
        if sentBelow[shard] < below {
            sentBelow[shard] = below
            if !isUnmarked[shard] {
                isUnmarked[shard] = true
                unmarked.append(entry.shard)
            }
        }
    }

    /// A notification the gateway must refuse, with an identifier of ours: its
    /// error response proves everything before it was accepted. Its token has
    /// an invalid size (never empty, which the gateway answers with identifier 0),
    /// and in a frame the identifier item comes first so it is read before the fault.
    private func appendSentinel() {
        nextSentinel &+= 1
        let identifier = 0x8000_0000 | UInt32(index & 0x7F) << 24 | (nextSentinel & 0x00FF_FFFF)
        let start = sent.count
        let payload = Array(#"{"aps":{}}"#.utf8)
        switch header.format {
        case .simple:
            return
        case .enhanced:
            NotificationEncoder.appendEnhanced(identifier: identifier, expiry: 0, token: [0], payload: payload, to: &sent)
        case .frame:
            var items: [UInt8] = [NotificationEncoder.Item.identifier.rawValue, 0, 4]
            items.appendBigEndian32(identifier)
            items += [NotificationEncoder.Item.deviceToken.rawValue, 0, 101] + [UInt8](repeating: 0, count: 101)
            items += [NotificationEncoder.Item.payload.rawValue, 0, UInt8(payload.count)] + payload
            sent.append(2)
            sent.appendBigEndian32(UInt32(items.count))
            sent += items
        }
        if batchStartedAt == nil { batchStartedAt = now }
        window.append(InFlight(seq: 0, shard: -1, ordinal: -1, identifier: identifier, start: start, end: sent.count,
                               attempts: 0, isSentinel: true))
        sentinelOut = true
        sentinelWrittenAt = nil
        // The gateway closes this connection once it answers the proof: open
        // the next one meanwhile, so the handshake (6 ms, two RSA signatures)
        // overlaps the wait instead of following it.
        if spare == nil, hasWork || (!inputFinished && !shared.isStopping) {
            spare = PendingConnection(host: settings.gatewayHost, port: settings.gatewayPort,
                                      context: shared.context, cancellation: shared.halt)
        }
    }

    private func takeRateToken() -> Bool {
        let t = now
        let perSecond = Double(settings.rate) / Double(max(1, settings.connections))
        if rateUpdatedAt == 0 { rateUpdatedAt = t; rateAllowance = min(perSecond, 64) }
        rateAllowance = min(perSecond, rateAllowance + Double(t - rateUpdatedAt) / 1e9 * perSecond)
        rateUpdatedAt = t
        guard rateAllowance >= 1 else { return false }
        rateAllowance -= 1
        return true
    }

    // MARK: - I/O

    private func pump(workLeft: Bool) {
        guard let connection else { return }
        let unwritten = sent.count - written
        let delay = UInt64(settings.batchDelayMilliseconds) * 1_000_000
        let dueAt = batchStartedAt.map { $0 + delay }
        let t = now
        let wantWrite = unwritten > 0 && (unwritten >= settings.batchBytes || sentinelOut || !workLeft
                                          || (dueAt.map { t >= $0 } ?? false) || shared.isStopping)
        var timeout: Int32 = 1000
        if unwritten > 0 && !wantWrite, let dueAt { timeout = Int32(max(0, min(1000, (Int64(dueAt) - Int64(t)) / 1_000_000 + 1))) }
        if settings.rate > 0 && hasWork { timeout = min(timeout, 5) }
        var fds = [pollfd(fd: connection.socket.fd, events: Int16(POLLIN) | (wantWrite ? Int16(POLLOUT) : 0), revents: 0),
                   pollfd(fd: shared.cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   // Once stopping, halt stays readable: watching it would turn
                   // the wait for the last proof into a busy loop (poll skips -1).
                   pollfd(fd: shared.isStopping ? -1 : shared.halt.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0)]
        var watchQueue = !inputFinished && queueEmpty && !sentinelOut && unwritten < settings.batchBytes
        if watchQueue && !queue.prepareToSleep() {
            // Frames arrived meanwhile: no need to wait for them.
            watchQueue = false
            queueEmpty = false
            if !wantWrite { timeout = 0 }
        }
        _ = poll(&fds, watchQueue ? 4 : 3, timeout)
        if fds[0].revents != 0 || wantWrite {
            if !readResponses() { return }
        }
        if wantWrite, self.connection != nil {
            writeSome()
            if self.connection != nil, written < sent.count,
               Double(now - lastWriteProgress) / 1e9 > settings.stallSeconds {
                gatewaySilent("nothing could be written for \(format1(settings.stallSeconds)) s: the gateway is not reading")
                return
            }
        }
        if sentinelOut, let at = sentinelWrittenAt, Double(now - at) / 1e9 > settings.stallSeconds {
            gatewaySilent("no answer to the proof of acceptance within \(format1(settings.stallSeconds)) s")
        }
    }

    /// The gateway neither reads nor answers. Three connections like that in a
    /// row (with no response between them) end the send, resumable, rather than
    /// retrying for ever.
    private func gatewaySilent(_ what: String) {
        consecutiveStalls += 1
        shared.log("connection \(index + 1): \(what); reconnecting")
        connectionLost(reason: what, countStrike: false)
        if consecutiveStalls >= 3 {
            shared.fail(.unreachable(TLSError(.timedOut(operation: "waiting for a gateway that stopped reading or answering (3 connections in a row)"))))
        }
    }

    private func writeSome() {
        guard let connection else { return }
        if !unmarked.isEmpty {
            // Write-ahead: the journal learns what may reach the gateway before it can,
            // so a resume after a crash knows which notifications may be duplicates.
            shared.markSent(shards: unmarked, below: sentBelow)
            for shard in unmarked { isUnmarked[Int(shard)] = false }
            unmarked.removeAll(keepingCapacity: true)
        }
        while written < sent.count {
            let result: TLSConnection.IOResult
            do {
                result = try sent.withUnsafeBytes { raw in
                    try connection.tryWrite(UnsafeRawBufferPointer(rebasing: raw[written...]))
                }
            } catch {
                connectionLost(reason: "\(error)")
                return
            }
            switch result {
            case .bytes(let n):
                written += n
                lastWriteProgress = now
            case .wantRead, .wantWrite:
                return
            case .closed:
                connectionLost(reason: "the gateway closed the connection")
                return
            }
        }
        batchStartedAt = nil
        if sentinelOut, sentinelWrittenAt == nil { sentinelWrittenAt = now }
        if header.format == .simple { presumeWritten() }
    }

    /// Reads whatever the gateway sent. False when the connection ended.
    private func readResponses() -> Bool {
        guard let connection else { return false }
        while true {
            let result: TLSConnection.IOResult
            do {
                result = try readBuffer.withUnsafeMutableBytes { try connection.tryRead(into: $0) }
            } catch {
                connectionLost(reason: "\(error)")
                return false
            }
            switch result {
            case .bytes(let n):
                decoder.append(readBuffer[0..<n])
                do {
                    if let response = try decoder.next() {
                        handle(response)
                        return false
                    }
                } catch {
                    shared.log("connection \(index + 1): \(error) Treating the connection as lost.")
                    connectionLost(reason: "protocol error")
                    return false
                }
            case .wantRead, .wantWrite:
                return true
            case .closed:
                connectionLost(reason: "closed without an error response")
                return false
            }
        }
    }

    // MARK: - Outcomes

    /// The gateway's error response: split the window at the named notification.
    private func handle(_ response: ErrorResponse) {
        consecutiveStalls = 0
        let named = window.lastIndex { $0.identifier == response.identifier }
        var outcome = ProofOutcome()
        if response.status == .shutdown {
            guard let end = named.map({ $0 + 1 }) ?? (response.identifier == 0 ? 0 : nil) else {
                shared.log("connection \(index + 1): a shutdown response names identifier \(response.identifier), which was never sent on it; treating the connection as lost")
                connectionLost(reason: "unknown identifier")
                return
            }
            accept(window[..<end], into: &outcome)
            requeue(window[end...])
            shared.count(shutdowns: 1)
        } else {
            guard let i = named else {
                shared.log("connection \(index + 1): an error response (status \(response.status)) names identifier \(response.identifier), which was never sent on it; treating the connection as lost")
                connectionLost(reason: "unknown identifier")
                return
            }
            accept(window[..<i], into: &outcome)
            let entry = window[i]
            if !entry.isSentinel {
                settle(entry, status: response.status, into: &outcome)
            }
            requeue(window[(i + 1)...])
        }
        shared.record(outcome)
        if outcome.accepted > 0 { dropStrikes.removeAll() }
        closeConnection(abort: false)
    }

    private func accept(_ entries: ArraySlice<InFlight>, into outcome: inout ProofOutcome) {
        // Bucketed by shard in an array, then moved into the outcome: a
        // dictionary operation per notification cost more than the rest of the proof.
        var maxShard: Int32 = -1
        for e in entries where e.shard > maxShard { maxShard = e.shard }
        guard maxShard >= 0 else { return }
        var byShard = [[Int]](repeating: [], count: Int(maxShard) + 1)
        let retrying = !attempts.isEmpty
        for e in entries where !e.isSentinel {
            byShard[Int(e.shard)].append(Int(e.ordinal))
            if retrying { attempts[e.seq] = nil }
        }
        for (shard, ordinals) in byShard.enumerated() where !ordinals.isEmpty {
            outcome.acceptedOrdinals[Int32(shard), default: []] += ordinals
            outcome.accepted += ordinals.count
            acceptedOnConnection += ordinals.count
        }
    }

    /// Applies the rules per status to the notification an error response names.
    private func settle(_ e: InFlight, status: ErrorResponse.Status, into outcome: inout ProofOutcome) {
        let token = tokenBytes(of: e)
        switch status.rawValue {
        case 8:
            outcome.fail(e, status: status, token: token, gaveUp: false)
        case 2...7, 128:
            shared.log("connection \(index + 1): the gateway refused plan record \(e.seq) with status \(status): a bug in the plan or the encoder; it will not be sent again")
            outcome.fail(e, status: status, token: token, gaveUp: false)
        default:
            // 1, 255 and codes the guides do not define: worth a bounded number of retries.
            let tries = e.attempts + 1   // refusals so far, this one included
            if tries > Self.maxRetries {
                outcome.fail(e, status: status, token: token, gaveUp: true)
                attempts[e.seq] = nil
            } else {
                attempts[e.seq] = tries
                var again = e
                again.attempts = tries
                requeueFront([again])
            }
        }
    }

    private func tokenBytes(of e: InFlight) -> [UInt8] {
        switch header.format {
        case .simple: return Array(sent[(e.start + 3)..<min(e.end, e.start + 35)])
        case .enhanced: return Array(sent[(e.start + 11)..<min(e.end, e.start + 43)])
        case .frame:
            let count = Int(sent[e.start + 6]) << 8 | Int(sent[e.start + 7])
            return Array(sent[(e.start + 8)..<min(e.end, e.start + 8 + count)])
        }
    }

    private func requeue(_ entries: ArraySlice<InFlight>) {
        requeueFront(Array(entries.filter { !$0.isSentinel }))
    }

    private func requeueFront(_ entries: [InFlight]) {
        guard !entries.isEmpty else { return }
        let fresh = entries.map { e in
            Resend(seq: e.seq, shard: e.shard, ordinal: e.ordinal, identifier: e.identifier,
                   frame: Array(sent[e.start..<e.end]), attempts: e.attempts)
        }
        resends = fresh + resends[resendHead...]
        resendHead = 0
        shared.count(resends: fresh.count)
    }

    /// Connections in a row, over all workers, that may end with nothing
    /// proven before the send gives up (resumable): enough for every worker
    /// to quarantine one notification that kills its connections.
    static func fruitlessLimit(connections: Int) -> Int { 5 * connections + 5 }

    /// The connection ended without an error response: nothing in the window is proven.
    private func connectionLost(reason: String, countStrike: Bool = true) {
        let entries = window.filter { !$0.isSentinel }
        let risked = entries.filter { $0.start < written }.count
        if header.format == .simple {
            // Written notifications were presumed already; only unwritten ones go again.
            requeueFront(entries.filter { $0.start >= written })
        } else {
            var gatewayHasAnswered = true
            if countStrike, acceptedOnConnection == 0 {
                let fruitless = shared.connectionWasFruitless()
                gatewayHasAnswered = fruitless.gatewayHasAnswered
                if fruitless.inARow >= Self.fruitlessLimit(connections: settings.connections) {
                    shared.fail(.unproductive(connections: fruitless.inARow))
                }
            }
            if countStrike, acceptedOnConnection == 0, gatewayHasAnswered, let first = entries.first {
                let strikes = (dropStrikes[first.seq] ?? 0) + 1
                dropStrikes[first.seq] = strikes
                if strikes >= 5 {
                    // The same notification heads every lost connection: quarantine it.
                    var outcome = ProofOutcome()
                    outcome.fail(first, status: .unknown, token: tokenBytes(of: first), gaveUp: true)
                    shared.record(outcome)
                    shared.log("connection \(index + 1): plan record \(first.seq) was at the head of 5 lost connections in a row; quarantined")
                    requeueFront(Array(entries.dropFirst()))
                    dropStrikes[first.seq] = nil
                    shared.count(duplicatesRisked: max(0, risked - 1), drops: 1)
                    closeConnection(abort: true)
                    return
                }
            }
            requeueFront(entries)
            if risked > 0 {
                adaptiveEvery = max(64, min(adaptiveEvery ?? Int.max, max(1, risked / 2)))
            }
        }
        shared.count(duplicatesRisked: header.format == .simple ? 0 : risked, drops: 1)
        closeConnection(abort: true)
        _ = reason
    }

    /// Simple format: no error responses, so what is written is presumed delivered.
    private func presumeWritten() {
        var outcome = ProofOutcome()
        for e in window where !e.isSentinel {
            outcome.presumedOrdinals[e.shard, default: []].append(Int(e.ordinal))
            outcome.presumed += 1
        }
        shared.record(outcome)
        resetWindow()
    }

    private func resetWindow() {
        window.removeAll(keepingCapacity: true)
        unproven = 0
        sent.removeAll(keepingCapacity: true)
        written = 0
        sinceProof = 0
        sentinelOut = false
        sentinelWrittenAt = nil
        batchStartedAt = nil
        decoder = ErrorResponseDecoder()
    }

    private func closeConnection(abort: Bool) {
        if let connection { abort ? connection.abort() : connection.close() }
        connection = nil
        resetWindow()
    }
}

/// A connection being opened on a thread of its own.
final class PendingConnection: @unchecked Sendable {
    private var result: Result<TLSConnection, TLSError>? = nil
    private var thread = pthread_t()
    private var joined = false

    init(host: String, port: Int, context: TLSContext, cancellation: CancellationPipe) {
        thread = startThread { [self] in
            do throws(TLSError) {
                result = .success(try TLSConnection.connect(host: host, port: port, context: context, timeout: 30, cancellation: cancellation))
            } catch {
                result = .failure(error)
            }
        }
    }

    /// Waits for the attempt to end (the join orders its result before this read).
    func wait() -> Result<TLSConnection, TLSError> {
        if !joined { pthread_join(thread, nil); joined = true }
        return result!
    }
}

/// What a proof (or a presumption) settled, to journal in one go.
struct ProofOutcome {
    /// Ordinals proven accepted, per shard.
    var acceptedOrdinals: [Int32: [Int]] = [:]
    /// Ordinals presumed delivered (simple format), per shard.
    var presumedOrdinals: [Int32: [Int]] = [:]
    var accepted = 0
    var presumed = 0
    var failures: [SendFailure] = []

    mutating func fail(_ e: InFlight, status: ErrorResponse.Status, token: [UInt8], gaveUp: Bool) {
        failures.append(SendFailure(seq: e.seq, shard: Int(e.shard), ordinal: Int(e.ordinal), status: status.rawValue,
                                    token: token, gaveUp: gaveUp))
    }
}

/// Per-send constants every worker needs.
struct WorkerHeader: Sendable {
    var format: NotificationFormat
    var shards: Int
    var expiry: UInt32
    var priority: NotificationPriority?
}

func format1(_ x: Double) -> String {
    x == x.rounded() ? String(Int(x)) : String(Double(Int(x * 10)) / 10)
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian32(_ v: UInt32) {
        append(UInt8(truncatingIfNeeded: v >> 24)); append(UInt8(truncatingIfNeeded: v >> 16))
        append(UInt8(truncatingIfNeeded: v >> 8)); append(UInt8(truncatingIfNeeded: v))
    }
}
