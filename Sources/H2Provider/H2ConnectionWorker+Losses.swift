#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignTLS
import GatewayClient
import SendEngine

/// Silence, lost connections and streams, what a stop leaves open, and
/// what the connection tells the pool.
extension H2ConnectionWorker {
    // MARK: - The pool's gauge

    /// What holds this connection back while work waits: every stream the
    /// server allows is open, or its window has no room for another payload.
    package func heldBack(_ session: H2Session) -> (window: Bool, streams: Bool) {
        guard readyCount > 0 || !engine.queueEmpty, !goingAway, !shared.isStopping else { return (false, false) }
        if session.unsentBodyBytes > 0, session.unsentBodyBytes >= session.remoteWindow { return (true, false) }
        return (false, inFlight.count >= streamLimit(session))
    }

    package func account(_ bound: (window: Bool, streams: Bool), since: UInt64) {
        let t = now
        let spent = t - min(t, since)
        tally.open += spent
        if bound.window { tally.windowBound += spent }
        if bound.streams { tally.streamBound += spent }
        if t - tallyPublishedAt >= Self.gaugeNanoseconds { publishGauge(at: t) }
    }

    package func noteRoundTrip(_ nanoseconds: UInt64) {
        tally.roundTrip = min(tally.roundTrip ?? nanoseconds, nanoseconds)
    }

    package func publishGauge(at t: UInt64) {
        tallyPublishedAt = t
        tally.pingRoundTrip = pingRoundTrip
        let cpu = CPUTimes.thisThreadNanoseconds()
        tally.cpu = cpu - min(cpu, threadCPUPublished)
        threadCPUPublished = cpu
        gauge?.publish(&tally, productive: productive)
    }

    // MARK: - Lost connections

    /// Why the connection counts as silent, if it does: a request has waited
    /// longer than the answer timeout (a server that holds streams, never
    /// grows its window, drips its answer or floods frames instead of
    /// answering), or work has waited that long on a server that allows no
    /// stream. Checked once a second.
    package func answerTimeout(_ session: H2Session, at t: UInt64) -> String? {
        let limit = settings.answerTimeoutSeconds
        if inFlight.isEmpty, open?.machine.mayStartStreams(at: t) == true, !shared.isStopping, streamLimit(session) == 0, hasWorkForAStream() {
            let since = withOpen { c in
                if c.stalledSince == nil { c.stalledSince = t }
                return c.stalledSince!
            } ?? t
            if Double(t - since) / 1e9 > limit {
                return "the server has allowed no stream (SETTINGS_MAX_CONCURRENT_STREAMS 0) for \(format1(limit)) s"
            }
        } else {
            withOpen { $0.stalledSince = nil }
        }
        guard !inFlight.isEmpty, t - min(t, open?.lastAnswerCheck ?? 0) >= 1_000_000_000 || limit < 2 else { return nil }
        withOpen { $0.lastAnswerCheck = t }
        let oldest = inFlight.values.lazy.map(\.sentAt).min() ?? t
        if Double(t - min(t, oldest)) / 1e9 > limit {
            return "a request has had no answer for \(format1(limit)) s (--answer-timeout)"
        }
        return nil
    }

    /// Whether work waits for a stream on this connection: notifications it
    /// holds (ready, or due after a backoff), or the queue's. A server that
    /// drops its limit to 0 mid-send may first answer everything open, and
    /// then the work is all in the queue: with no stream to fill, nothing
    /// takes from it (so nothing looks at it), hence the look here.
    package func hasWorkForAStream() -> Bool {
        if readyCount > 0 || !waiting.isEmpty { return true }
        guard !engine.isRetiring else { return false }   // it takes no new work: the queue is not its to wait for
        engine.lookAtQueue()
        return !engine.queueEmpty
    }


    /// `item` was open when its connection or stream was lost: it may have
    /// been processed. Counted as a possible duplicate (once), and returned
    /// to send again, unless it has now been lost ``H2NotificationLimits/maxLosses``
    /// times: then it is not sent again in this run (a server that takes
    /// each request and drops the connection must not get it thousands of times).
    package func lost(_ item: Item) -> Item? {
        var item = item
        item.losses += 1
        if !item.risked {
            item.risked = true
            shared.count(duplicatesRisked: 1)
        }
        if item.losses >= H2NotificationLimits.maxLosses {
            shared.parked()
            parkedNotLogged.append(item.seq)
            return nil
        }
        return item
    }

    /// One line for the notifications ``lost(_:)`` stopped sending since the
    /// last (a server dropping every connection parks hundreds at once: one
    /// line each flooded the terminal).
    package func logParked() {
        guard let first = parkedNotLogged.min() else { return }
        let n = parkedNotLogged.count
        engine.log(n == 1
            ? "plan record \(first) was open on \(H2NotificationLimits.maxLosses) lost connections; it is not sent again in this run (resume to send it)"
            : "\(n) plan records (from \(first)) were open on \(H2NotificationLimits.maxLosses) lost connections each; they are not sent again in this run (resume to send them)")
        parkedNotLogged.removeAll()
    }

    /// The open requests whose body has not all been framed (the server
    /// cannot have processed them), and the others, each oldest first.
    package func splitByBody(_ open: [Int32: Item]) -> (unsent: [Item], sent: [Item]) {
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
    package func cancelUnsent() {
        guard let session, session.unsentBodyBytes > 0 else { return }
        for (stream, _) in inFlight where session.bodyIsUnsent(stream) {
            session.resetStream(stream, errorCode: H2Session.ErrorCode.cancel)
            inFlight[stream] = nil
        }
    }

    /// Counts what is left open at a stop as possible duplicates (once each).
    package func riskAll<S: Sequence>(_ items: S) where S.Element == Item {
        let n = items.reduce(0) { $0 + ($1.risked ? 0 : 1) }
        if n > 0 { shared.count(duplicatesRisked: n) }
    }

    /// The connection ended with streams open: they may have been processed,
    /// so they go again, counted as possible duplicates. (The engine closes it.)
    package func connectionLost() {
        let (unsent, open) = splitByBody(inFlight)
        inFlight.removeAll()
        // A request whose body never all went out cannot have been processed: it goes again exactly.
        let again = (unsent + open.compactMap(lost)).sorted { $0.seq < $1.seq }
        logParked()
        // First on the next connection, oldest first: the longer they wait
        // behind new work, the likelier a later loss catches them open again.
        ready.insert(contentsOf: again, at: readyHead)
        if !open.isEmpty || !unsent.isEmpty {
            shared.count(resends: again.count, kind: "lost connection", drops: 1)
            shared.serverTrouble("a connection lost with \(open.count) request\(open.count == 1 ? "" : "s") open", limitSeconds: settings.outageLimitSeconds)
        }
    }

    /// The connection's own state goes with it.
    package func dropSession() { connectionState = .closed }
}
