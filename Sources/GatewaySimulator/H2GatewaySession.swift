#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignJSON
import CampaignTLS

/// The HTTP/2 provider API's side of one connection: SETTINGS like Apple's,
/// each request validated (``H2Request/validate(authentication:)``, or the
/// channel routes' checks), faults applied, answered on its stream; GOAWAY,
/// drops and stalls as the fault plan says. Reports progress to its owner
/// after each read.
struct H2GatewaySession {
    /// The listener a connection came in on: their routes differ.
    enum Port: Equatable {
        /// `/3/device` and `/4/broadcasts` (Apple serves both on one host, §5.1).
        case device
        /// The channel management API (`--management-port`).
        case management
    }

    /// What changed since the last report.
    struct Progress {
        /// Device pushes' answers (on the management listener: its answers).
        var answers: [String: Int] = [:]
        var accepted = 0
        var broadcastAnswers: [String: Int] = [:]
        var broadcasts = 0
        /// Answers made, then dropped with the connection before they were written.
        var neverWritten = 0
        var ending: String? = nil
        var recordLines: [UInt8] = []
    }

    let index: Int
    let port: Port
    let faults: FaultPlan
    let recording: Bool
    let channels: ChannelService
    /// The client certificate's topic; nil: token authentication (`tokens`).
    let certificateTopic: String?
    var tokens: ProviderTokenCheck?
    private var rng: SplitMix64
    private(set) var streamsAnswered = 0

    init(index: Int, port: Port = .device, faults: FaultPlan, recording: Bool, channels: ChannelService,
         certificateTopic: String?, tokens: ProviderTokenCheck?) {
        self.index = index
        self.port = port
        self.faults = faults
        self.recording = recording
        self.channels = channels
        self.certificateTopic = certificateTopic
        self.tokens = tokens
        rng = SplitMix64(seed: faults.seed &+ UInt64(index))
    }

    private var maxStreams: UInt32 { UInt32(faults.maxStreams ?? 1000) }

    /// Apple's SETTINGS: MAX_CONCURRENT_STREAMS (1000, or `--max-streams`),
    /// INITIAL_WINDOW_SIZE 65535, MAX_FRAME_SIZE 16384, MAX_HEADER_LIST_SIZE 8000.
    static func settings(maxStreams: UInt32) -> [(id: Int32, value: UInt32)] {
        [(id: 3, value: maxStreams), (id: 4, value: 65_535), (id: 5, value: 16_384), (id: 6, value: 8_000)]
    }

    mutating func run(connection: TLSConnection, cancellation: CancellationPipe, report: (Progress) -> Void) -> GatewaySession.Ending {
        let session: H2Session
        do {
            // As Apple does, a token-authenticated connection carries one
            // stream until a request with a valid token succeeds.
            session = try H2Session(role: .server, settings: Self.settings(maxStreams: certificateTopic == nil ? 1 : maxStreams))
        } catch {
            return .dropped
        }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var out: [UInt8] = []
        var goingAway = false
        func end(_ progress: inout Progress, _ text: String, _ ending: GatewaySession.Ending) -> GatewaySession.Ending {
            progress.ending = text
            report(progress)
            return ending
        }
        while true {
            var progress = Progress()
            out.removeAll(keepingCapacity: true)
            do throws(H2Error) { try session.send(into: &out) } catch { return end(&progress, "framing failed: \(error)", .dropped) }
            if !out.isEmpty {
                do throws(TLSError) { try connection.write(out, cancellation: cancellation, deadline: .after(seconds: 30)) } catch {
                    return end(&progress, "write failed: \(error)", .dropped)
                }
            }
            // After a GOAWAY the streams it covers are still answered, as a
            // server shutting down gracefully does; the client closes once
            // it has its answers (or nghttp2 ends the session).
            if !session.isActive {
                return goingAway ? end(&progress, "goaway after \(streamsAnswered) streams", .wentAway) : end(&progress, "session ended", .peerClosed)
            }
            if let stall = faults.stallAfter, streamsAnswered >= stall {
                // Neither read nor answer again: a gateway that hangs.
                _ = sleep(until: .distantFuture, cancellation: cancellation)
                return end(&progress, "stalled after \(streamsAnswered) streams", .cancelled)
            }
            if faults.readDelayMilliseconds > 0, !sleep(until: .after(milliseconds: faults.readDelayMilliseconds), cancellation: cancellation) {
                return end(&progress, "simulator stopped", .cancelled)
            }
            let n: Int
            do throws(TLSError) { n = try connection.read(into: &buffer, cancellation: cancellation) } catch {
                if case .cancelled = error.kind { return end(&progress, "simulator stopped", .cancelled) }
                return end(&progress, "read failed: \(error)", .peerClosed)
            }
            if n == 0 { return end(&progress, goingAway ? "goaway after \(streamsAnswered) streams" : "client closed", .peerClosed) }
            do throws(H2Error) {
                try session.receive(buffer, count: n)
            } catch {
                // nghttp2 has queued a GOAWAY saying why: send it, then close.
                out.removeAll(keepingCapacity: true)
                try? session.send(into: &out)
                try? connection.write(out, cancellation: cancellation, deadline: .after(seconds: 5))
                return end(&progress, "protocol error: \(error)", .peerClosed)
            }
            for event in session.drainEvents() {
                guard case .message(let stream, let headers, let body) = event else { continue }
                let request = H2Request(headers: headers.map { ($0.name, $0.value) }, body: body)
                let hadToken = tokens?.hasValidToken ?? true
                let response = respond(request, stream: stream)
                let reply = response.reply
                if !hadToken, tokens?.hasValidToken == true, (200..<300).contains(reply.status) { session.submitSettings([(id: 3, value: maxStreams)]) }
                var responseHeaders = [H2Session.Header(":status", String(reply.status))] + response.headers
                if let retry = reply.retryAfter { responseHeaders.append(.init("retry-after", String(retry))) }
                if response.isJSON { responseHeaders.append(.init("content-type", "application/json")) }
                // An HTTP date on refusals (not on each 200: the answer a benchmark makes millions of), for clients that check their clock.
                if reply.status != 200 { responseHeaders.append(.init("date", Self.httpDate())) }
                do throws(H2Error) { try session.submitResponse(stream: stream, headers: responseHeaders, body: response.body) } catch {
                    return end(&progress, "cannot answer: \(error)", .dropped)
                }
                streamsAnswered += 1
                switch response.kind {
                case .device, .management:
                    progress.answers[reply.key, default: 0] += 1
                    if reply.status == 200 && response.kind == .device {
                        progress.accepted += 1
                        if recording { appendRecord(request, stream: stream, to: &progress.recordLines) }
                    }
                case .broadcast:
                    progress.broadcastAnswers[reply.key, default: 0] += 1
                    if reply.status == 200 {
                        progress.broadcasts += 1
                        progress.recordLines += response.recordLine
                    }
                }
                if let n = faults.dropEvery, streamsAnswered % n == 0 {
                    // Answered in nghttp2's queue, never written: the client
                    // sees a lost connection, and the answers since the last
                    // write (this read's) are not answers it got. What was
                    // accepted stays accepted (and recorded): it reached the device.
                    progress.neverWritten = progress.answers.values.reduce(0, +) + progress.broadcastAnswers.values.reduce(0, +)
                    (progress.answers, progress.broadcastAnswers) = ([:], [:])
                    return end(&progress, "dropped after \(streamsAnswered) streams", .dropped)
                }
                if let n = faults.goAwayAfter, streamsAnswered >= n, !goingAway {
                    // The last stream that was or may be processed: every
                    // stream it began to receive. Later ones are refused.
                    session.submitGoAway(lastStreamID: session.lastProcessedStreamID)
                    goingAway = true
                }
            }
            report(progress)
        }
    }

    /// The answer to a request: validation first, then the faults, as a gateway would.
    mutating func answer(_ request: H2Request) -> H2Reply {
        if index <= faults.tokenUpdateRefusals && streamsAnswered == 0 {
            return H2Reply(status: 429, reason: "TooManyProviderTokenUpdates")
        }
        let authentication: H2Request.Authentication
        if let certificateTopic {
            authentication = .certificate(topic: certificateTopic)
        } else {
            // Only a well-formed request gets as far as its token.
            let early = request.validate(authentication: .token(refusal: nil))
            if let early, early.reason != "MissingTopic" { return early }
            authentication = authenticate(request)
        }
        if let refusal = request.validate(authentication: authentication) { return refusal }
        let token = request.tokenHex.flatMap { DeviceToken(hex: $0) }?.bytes ?? []
        // A token of zero bytes only is never issued: APNs answers it BadDeviceToken (`campaign doctor --probe` sends one).
        if faults.badTokens.contains(token) || token.allSatisfy({ $0 == 0 }) { return H2Reply(status: 400, reason: "BadDeviceToken") }
        if let ts = faults.unregistered[token] { return H2Reply(status: 410, reason: "Unregistered", timestampMilliseconds: Int64(ts) * 1000) }
        return transientFault() ?? .accepted
    }

    /// The server trouble the fault plan draws for a valid request, if any:
    /// 429 TooManyRequests, then 500 or 503 (on every route: a client's
    /// retries of transient answers are tested on each).
    mutating func transientFault() -> H2Reply? {
        if faults.throttleRate > 0, Double(rng.next() % 1_000_000) / 1_000_000 < faults.throttleRate {
            return H2Reply(status: 429, reason: "TooManyRequests", retryAfter: 1)
        }
        if faults.errorRate > 0, Double(rng.next() % 1_000_000) / 1_000_000 < faults.errorRate {
            if rng.next() % 2 == 0 { return H2Reply(status: 500, reason: "InternalServerError") }
            var unavailable = H2Reply(status: 503, reason: "ServiceUnavailable")
            if faults.spacedReasons { unavailable.spelling = "Service Unavailable" }
            return unavailable
        }
        return nil
    }

    /// `{"conn":N,"stream":S,"authority":…,"apns_id":…,"topic":…,"push_type":…,"priority":…,"expiration":…,"collapse_id":…,"token":"hex","payload":"…"}`
    private func appendRecord(_ request: H2Request, stream: Int32, to out: inout [UInt8]) {
        func optional(_ name: String, _ key: String) {
            out.append(contentsOf: ",\"\(key)\":".utf8)
            if let v = request.field(name) { JSONText.appendString(Array(v.utf8), to: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        out.append(contentsOf: #"{"conn":"#.utf8)
        JSONText.appendDecimal(index, to: &out)
        out.append(contentsOf: #","received_ms":"#.utf8)
        JSONText.appendDecimal(NotificationRecordFile.nowMilliseconds(), to: &out)
        out.append(contentsOf: #","stream":"#.utf8)
        JSONText.appendDecimal(stream, to: &out)
        out.append(contentsOf: #","authority":"#.utf8)
        if let a = request.authority { JSONText.appendString(Array(a.utf8), to: &out) } else { out.append(contentsOf: "null".utf8) }
        optional("apns-id", "apns_id")
        optional("apns-topic", "topic")
        out.append(contentsOf: #","push_type":"#.utf8)
        JSONText.appendString(Array((request.field("apns-push-type") ?? "alert").utf8), to: &out)
        optional("apns-priority", "priority")
        optional("apns-expiration", "expiration")
        optional("apns-collapse-id", "collapse_id")
        out.append(contentsOf: #","token":"#.utf8)
        JSONText.appendString(Array((request.tokenHex ?? "").lowercased().utf8), to: &out)
        out.append(contentsOf: #","payload":"#.utf8)
        JSONText.appendString(request.body, to: &out)
        out.append(contentsOf: "}\n".utf8)
    }

    /// Now as an HTTP date (RFC 9110: `Sun, 06 Nov 1994 08:49:37 GMT`).
    static func httpDate() -> String {
        var t = time(nil)
        var parts = tm()
        gmtime_r(&t, &parts)
        var buffer = [Int8](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
