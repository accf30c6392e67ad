#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignTLS
import SendJournal
import GatewayClient
import SendEngine

/// What the server's answers, resets and GOAWAYs mean for each notification
/// (the table in docs/protocol.md), and the sentences for refused credentials.
extension H2ConnectionWorker {
    // MARK: - Outcomes

    package func handle(_ events: [H2Session.Event]) {
        defer { logParked() }
        for event in events {
            switch event {
            case .message(let stream, let headers, let body):
                guard let item = inFlight.removeValue(forKey: stream) else { continue }
                noteRoundTrip(now - min(now, item.sentAt))
                let status = headers.first { $0.name == ":status" }.flatMap { Int($0.value) } ?? 0
                var answer = H2Answer(status: status, body: body, retryAfter: headers.first { $0.name == "retry-after" }?.value)
                answer.uniqueID = fields.target.uniqueID(status: status, headers: headers)
                answered(item, answer)
            case .streamClosed(let stream, let code):
                guard let item = inFlight.removeValue(forKey: stream) else { continue }
                if code == H2Session.ErrorCode.refusedStream {
                    // RFC 9113 §8.7: never processed, so sent again exactly,
                    // after a backoff (a server refusing every stream must not
                    // turn this loop into a busy one).
                    retryLater(item, afterSeconds: nil, kind: "REFUSED_STREAM")
                    shared.serverTrouble("RST_STREAM REFUSED_STREAM", limitSeconds: settings.outageLimitSeconds)
                } else {
                    // Reset without an answer: it may have been processed, so
                    // again as a possible duplicate, after a backoff, and not
                    // in this run once it was lost this way too often.
                    shared.serverTrouble("RST_STREAM \(H2Session.ErrorCode.name(code))", limitSeconds: settings.outageLimitSeconds)
                    if let again = lost(item) { later(again, afterSeconds: nil, kind: "reset \(H2Session.ErrorCode.name(code))") }
                }
            case .goAway(let last, let code):
                withOpen { $0.machine.goAway() }
                if code != H2Session.ErrorCode.noError {
                    engine.log("the server is closing the connection (GOAWAY, error \(code), last stream \(last)); what it did not process goes on the next")
                }
            case .pingAcknowledged:
                let t = now
                if let rtt = withOpen({ $0.machine.pingAcknowledged(at: t) }) ?? nil {
                    noteRoundTrip(rtt)
                    pingRoundTrip = min(pingRoundTrip ?? rtt, rtt)
                }
            case .settings:
                withOpen { $0.machine.settingsArrived() }
            }
        }
    }

    package func answered(_ item: Item, _ answer: H2Answer) {
        switch answer.verdict(broadcast: fields.target.answersAsBroadcast) {
        case .accepted:
            withOpen { $0.acceptedOnConnection = true }
            becameProductive()
            answers.acceptedOrdinals[item.shard, default: []].append(Int(item.ordinal))
            answers.accepted += 1
            if fields.target.journalsAnswerIDs {
                answers.answerIDs.append(.init(seq: item.seq, requestID: NotificationID.uuid(hash: idHash, seq: item.seq), uniqueID: answer.uniqueID))
            }
        case .accountRefused:
            ready.append(item)   // not final: once the capability is on, a resume sends it
            shared.fail(.accountState("APNs refused the broadcast (\(answer.label)): the broadcast capability is off for \(fields.header.http2?.topic ?? "this app"); turn it on for the App ID on developer.apple.com (Certificates, Identifiers & Profiles), then resume with `campaign send --resume \(shared.journal.directory)`."))
        case .unregistered(let at):
            becameProductive()
            // A time in the future (a server's mistake) would keep the token out of every plan until then.
            let arrived = UInt32(clamping: Int64(engine.clock.wallSeconds))
            fail(item, answer, unregisteredAt: min(at ?? arrived, arrived))
        case .refusedForItsToken:
            becameProductive()
            fail(item, answer)
            if let advice = fields.target.advice(for: answer.reason), fields.toldOnce.first(advice.key) { engine.log(advice.sentence) }
        case .refusedAsMalformed:
            // Final only once the server shows it is sane (held until then).
            engine.log("APNs refused plan record \(item.seq) with \(answer.description): a bug in the plan or in campaign; it will not be sent again")
            let inARow = malformed.hold(failure(item, answer))
            if inARow >= MalformedRefusals.limit { shared.fail(.malformedRequests(count: inARow, last: answer.description)) }
        case .credentialRefused:
            ready.append(item)   // not final: a resume with the right credential sends it
            shared.fail(.credentialRefused(Self.sentence(for: answer, topic: fields.common.first { $0.name == "apns-topic" }?.value ?? fields.header.http2?.topic, tokenAuth: auth != nil)))
        case .providerTokenExpired:
            guard let auth, let used = connectionToken else {
                ready.append(item)
                shared.fail(.credentialRefused("APNs says the provider token expired (403 ExpiredProviderToken), but this send uses a certificate: is --gateway an APNs host?"))
                return
            }
            switch auth.expired(used) {
            case .renewed(let renewed):
                withOpen { $0.token = renewed }
                ready.append(item)
            case .tooYoungToRenew(let age):
                // Renewing a token younger than 20 minutes would earn 429
                // TooManyProviderTokenUpdates, and sending it again the same 403.
                ready.append(item)
                shared.fail(.credentialRefused("APNs says the provider token expired (403 ExpiredProviderToken), but it was made \(age / 60) min \(age % 60) s ago (APNs accepts a token for an hour): check this machine's clock (it must be within minutes of the real time), then resume."))
            }
        case .tooManyTokenUpdates:
            // Another process's token of the key is the one APNs holds: take it from the
            // shared cache when there is one; else no new connection helps for 20 minutes.
            retryLater(item, afterSeconds: nil, kind: answer.label)
            withOpen { $0.machine.goAway() }
            if let auth, let used = connectionToken, let other = auth.refusedAsTooManyUpdates(used) {
                withOpen { $0.token = other }
                shared.serverTrouble(answer.description, limitSeconds: settings.outageLimitSeconds)
            } else if shared.tokenRefused() {
                shared.fail(.providerTokenRefused(keyID: auth?.keyID ?? "?"))
            } else {
                shared.serverTrouble(answer.description, limitSeconds: settings.outageLimitSeconds)
            }
        case .retryLater(let after):
            retryLater(item, afterSeconds: after, kind: answer.label)
            // The server asked this connection to wait: it does, the others go on.
            if let after {
                let until = now + UInt64(after) * 1_000_000_000
                withOpen { $0.machine.pause(until: until) }
            }
            shared.serverTrouble(answer.description, limitSeconds: settings.outageLimitSeconds)
        case .unknown:
            retryLater(item, afterSeconds: nil, kind: answer.label)
            shared.serverTrouble(answer.status == 0 ? "an answer without a :status" : answer.description, limitSeconds: settings.outageLimitSeconds)
        }
    }

    /// An answer asked for a retry: one more for the backoff's exponent.
    package func retryLater(_ item: Item, afterSeconds: Int?, kind: String) {
        var item = item
        item.retries += 1
        later(item, afterSeconds: afterSeconds, kind: kind)
    }

    /// Puts `item` back after its backoff, or after what the server asked
    /// for when that is longer (``RetryBackoff``: `retry-after: 0` is a
    /// floor, not an order). Never final: the server's trouble says nothing
    /// about the notification.
    package func later(_ item: Item, afterSeconds: Int?, kind: String) {
        let wait = RetryBackoff.seconds(retries: item.retries, base: settings.retryBackoffSeconds, retryAfterSeconds: afterSeconds)
        waiting.append((now + UInt64(wait * 1e9), item))
        shared.count(resends: 1, kind: kind)
    }

    package func failure(_ item: Item, _ answer: H2Answer, unregisteredAt: UInt32? = nil) -> SendFailure {
        SendFailure(seq: item.seq, shard: Int(item.shard), ordinal: Int(item.ordinal),
                    cause: .http(status: answer.status, reason: answer.reason), token: Array(item.token), gaveUp: false,
                    attempts: item.retries + item.losses + 1, unregisteredAt: unregisteredAt)
    }

    package func fail(_ item: Item, _ answer: H2Answer, unregisteredAt: UInt32? = nil) {
        answers.failures.append(failure(item, answer, unregisteredAt: unregisteredAt))
    }

    package func becameProductive() {
        guard open?.productive == false else { return }
        withOpen { $0.productive = true }
        engine.dialer.productive()
    }

    /// Journals the answers gathered since the last time, together.
    package func flushAnswers() {
        // Something accepted: the server is sane, so what it refused as malformed was meant.
        if answers.accepted > 0 { answers.failures += malformed.release() }
        guard answers.accepted > 0 || !answers.failures.isEmpty else { return }
        shared.record(answers)
        answers = ProofOutcome()
    }

    /// One sentence for a refused credential: which, and what to do.
    package static func sentence(for answer: H2Answer, topic: String?, tokenAuth: Bool) -> String {
        let what = "(\(answer.status) \(answer.reason?.name ?? "no reason"))"
        switch answer.reason {
        case .badCertificateEnvironment?:
            return "APNs refused the provider certificate \(what): it is for the other environment; use --environment to match it, or the certificate for this environment."
        case .badCertificate?:
            return "APNs refused the provider certificate \(what): check --cert (and --key) is the app's APNs certificate, not expired or revoked."
        case .invalidProviderToken? where tokenAuth, .missingProviderToken? where tokenAuth:
            return "APNs refused the provider token \(what): check that --auth-key is the .p8 key whose id is --key-id, and --team-id is the team that owns it."
        case .invalidProviderToken?, .missingProviderToken?:
            return "APNs refused the provider certificate \(what): it wants a provider token, so the certificate was not taken as one for this app; check --cert (and --key), or send with --auth-key."
        case .topicDisallowed?, .forbidden?, .topicMismatch?:
            return "APNs refused to send to topic \(topic ?? "(the certificate's)") \(what): check the job's topic is the app's bundle id and the \(tokenAuth ? "key's team" : "certificate") may send to it."
        default:
            return "APNs refused the credential \(what): check \(tokenAuth ? "--auth-key, --key-id and --team-id" : "--cert and --key") and the job's topic."
        }
    }
}
