#if canImport(Glibc)
import Glibc
#endif
import Foundation
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignSend
import CampaignTLS
import PlanStream
import GatewayClient

/// One finding of `campaign doctor`: what was checked, how it went, in one sentence.
struct DoctorCheck: Equatable {
    enum Status: String { case ok, warning, failed }
    /// The class of a failure, as the exit code says it (sysexits).
    enum Class: Int32 {
        case route = 69, credentials = 77, job = 65, directories = 73
    }
    var name: String
    var status: Status
    var sentence: String
    var failureClass: Class?

    static func ok(_ name: String, _ sentence: String) -> DoctorCheck { DoctorCheck(name: name, status: .ok, sentence: sentence) }
    static func warning(_ name: String, _ sentence: String) -> DoctorCheck { DoctorCheck(name: name, status: .warning, sentence: sentence) }
    static func failed(_ name: String, _ class: Class, _ sentence: String) -> DoctorCheck {
        DoctorCheck(name: name, status: .failed, sentence: sentence, failureClass: `class`)
    }

    var json: JSONValue {
        .object([("check", .string(name)), ("status", .string(status.rawValue)), ("sentence", .string(sentence)),
                 ("exit_code", failureClass.map { .number(String($0.rawValue)) } ?? .null)])
    }
}

/// What `campaign doctor` looks at before a night's send: the credentials,
/// the job and plan, the directories, the route to the gateway (through the
/// proxy, TLS verified with the trust store the send will use), and with
/// `probe` one request APNs answers about the credentials alone.
struct DoctorInput {
    var host: String
    var port: Int
    var proxy: HTTPProxy?
    var certificate: String?
    var key: String?
    var passphrase: String?
    var ca: String?
    var authKey: String?
    var keyID: String?
    var teamID: String?
    var tokenCache: String?
    var job: String?
    var plan: String?
    var manifest: String?
    var journal: String?
    var ledger: String?
    /// The app's topic for the probe, when neither a job nor a plan names it.
    var topic: String?
    var probe = false
    /// Free bytes to assume in the journal's file system (tests of a full disk); nil: ask it.
    var freeBytes: Int64?
    var now = Date()
}

enum DoctorChecks {
    static let expiryWarningDays = 30.0
    static let clockWarningSeconds = 60.0

    static func run(_ input: DoctorInput) -> [DoctorCheck] {
        var checks: [DoctorCheck] = []
        var identity: TLSIdentity?
        var certificateTopic: String?
        // Credentials, read here as the send reads them.
        if let cert = input.certificate {
            let lower = cert.lowercased()
            do {
                identity = lower.hasSuffix(".p12") || lower.hasSuffix(".pfx")
                    ? try TLSIdentity.pkcs12(path: cert, passphrase: input.passphrase)
                    : try TLSIdentity.pem(certificate: cert, key: input.key, passphrase: input.passphrase)
                let c = identity!.certificate
                certificateTopic = c.subject.split(separator: ",").lazy.map { $0.trimmingWhitespace() }
                    .first { $0.hasPrefix("UID=") }.map { String($0.dropFirst(4)) }
                let days = c.notAfter.timeIntervalSince(input.now) / 86_400
                if days < 0 {
                    checks.append(.failed("certificate", .credentials, "The certificate \(cert) expired on \(day(c.notAfter)): APNs refuses it; make a new one in the developer account."))
                } else if input.now < c.notBefore {
                    checks.append(.failed("certificate", .credentials, "The certificate \(cert) is not valid before \(day(c.notBefore)): check the clock, or the certificate."))
                } else if days < expiryWarningDays {
                    checks.append(.warning("certificate", "The certificate \(cert) expires on \(day(c.notAfter)), in \(Int(days)) days: renew it before then."))
                } else {
                    checks.append(.ok("certificate", "\(cert): \(c.subject), valid until \(day(c.notAfter))\(certificateTopic.map { ", topic \($0)" } ?? "")."))
                }
            } catch {
                checks.append(.failed("certificate", .credentials, "\(error)"))
            }
        }
        if let authKey = input.authKey {
            do {
                let source = try ProviderTokenSource(keyPath: authKey, keyID: input.keyID ?? "", teamID: input.teamID ?? "",
                                                     cachePath: input.tokenCache.map { ProviderTokenSource.sharedCachePath(directory: $0, keyID: input.keyID ?? "") })
                _ = source.current()
                checks.append(.ok("token key", "\(authKey): a P-256 key; key id \(input.keyID ?? "?"), team \(input.teamID ?? "?")\(input.tokenCache.map { ", token kept in \($0)" } ?? "")."))
            } catch {
                checks.append(.failed("token key", .credentials, "\(error)"))
            }
        }

        // The job and the plan.
        var topic: String? = input.topic
        var pushType = "alert"
        if let path = input.job {
            do {
                let job = try CampaignJob.load(path: path)
                topic = job.topic
                pushType = job.pushType
                checks.append(.ok("job", "\(path): campaign \(job.campaign), \(job.wire) format\(job.topic.map { ", topic \($0)" } ?? "")."))
                if let refusal = PushTypeCredentials.refusal(pushType: job.pushType, tokenAuthentication: input.authKey != nil) {
                    checks.append(.failed("job", .job, "\(path): \(refusal)"))
                }
            } catch {
                checks.append(.failed("job", .job, "\(error)"))
            }
        }
        var planBytes: Int64 = 0
        var planRecords = 0
        var throttle: Int?
        if let plan = input.plan {
            do {
                let reader = try PlanReader(path: plan)
                topic = topic ?? reader.header.http2?.topic
                pushType = reader.header.http2?.pushType ?? pushType
                throttle = reader.header.throttlePerMinute
                planRecords = max(0, (try? PlanReader.checkComplete(path: plan)) ?? 0)
                planBytes = fileSize(plan)
                checks.append(.ok("plan", "\(plan): campaign \(reader.header.campaign), \(reader.header.wire), \(planRecords) records."))
            } catch {
                checks.append(.failed("plan", .job, "\(error)"))
            }
        }
        if let manifestPath = input.manifest {
            do {
                let m = try PlanManifest.load(path: manifestPath)
                let dir = (manifestPath as NSString).deletingLastPathComponent
                planRecords = m.records
                planBytes = m.parts.reduce(0) { $0 + fileSize("\(dir.isEmpty ? "." : dir)/\($1.file)") }
                if let first = m.parts.first, let reader = try? PlanReader(path: "\(dir.isEmpty ? "." : dir)/\(first.file)") {
                    topic = topic ?? reader.header.http2?.topic
                    throttle = reader.header.throttlePerMinute
                }
                checks.append(.ok("plan", "\(manifestPath): \(m.parts.count) parts, \(m.records) records."))
            } catch {
                checks.append(.failed("plan", .job, "\(error)"))
            }
        }
        if let perMinute = throttle, planRecords > 0 {
            let seconds = Int((Double(planRecords) * 60 / Double(perMinute)).rounded(.up))
            checks.append(.ok("throttle", "\(perMinute) a minute over every part: the \(planRecords) records take about \(durationText(seconds))."))
        }
        if let topic, let certificateTopic, input.authKey == nil {
            // A certificate names its app; a push type's topic adds a suffix to it (.voip, .complication, …).
            let suffix = PushTopic.suffix(for: pushType)
            let bare = !suffix.isEmpty && topic.hasSuffix(suffix) ? String(topic.dropLast(suffix.count)) : topic
            if bare != certificateTopic {
                checks.append(.failed("topic", .job, "The job's topic \(topic) is not the certificate's (\(certificateTopic)): APNs answers 400 TopicDisallowed or DeviceTokenNotForTopic; use the app's certificate, or the job of its app."))
            } else {
                checks.append(.ok("topic", "The topic \(topic) is the certificate's app."))
            }
        }

        // The directories the send writes.
        if let journal = input.journal {
            // The send makes the journal and any directory above it: the nearest that exists is where they go.
            var parts = journal.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
            let root = journal.hasPrefix("/") ? "/" : ""
            var parent = journal
            while access(parent, F_OK) != 0 {
                guard !parts.isEmpty else { break }
                parts.removeLast()
                parent = parts.isEmpty ? (root.isEmpty ? "." : root) : root + parts.joined(separator: "/")
            }
            if access(parent, W_OK) != 0 {
                checks.append(.failed("journal directory", .directories, "\(parent) cannot be written: the send's journal (\(journal)) would not be made."))
            } else {
                let free = input.freeBytes ?? freeSpace(parent)
                // A piped plan is spooled in the journal; a journal's records are a small part of the plan.
                if let free, planBytes > 0, free < planBytes {
                    checks.append(.failed("journal directory", .directories, "\(parent) has \(megabytes(free)) free, less than the plan's \(megabytes(planBytes)) (a piped plan is spooled in the journal): free some space, or journal elsewhere."))
                } else {
                    checks.append(.ok("journal directory", "\(parent) is writable\(free.map { ", \(megabytes($0)) free" } ?? "")."))
                }
            }
        }
        if let ledger = input.ledger {
            var isDirectory: ObjCBool = false
            if !FileManager.default.fileExists(atPath: ledger, isDirectory: &isDirectory) || !isDirectory.boolValue {
                checks.append(.failed("ledger", .directories, "The ledger \(ledger) is not a directory: make it (mkdir), or name the app's ledger."))
            } else if access(ledger, R_OK | W_OK | X_OK) != 0 {
                checks.append(.failed("ledger", .directories, "The ledger \(ledger) cannot be read and written by this user."))
            } else {
                checks.append(.ok("ledger", "The ledger \(ledger) is readable and writable."))
            }
        }

        // The route, with the trust store the send will use.
        let context: TLSContext
        do {
            context = try TLSContext.client(identity: identity, trust: input.ca.map { .file($0) } ?? .system, http2: true)
        } catch {
            checks.append(.failed("route", .credentials, "\(error)"))
            return checks
        }
        let via = input.proxy.map { " through the proxy \($0)" } ?? ""
        let connection: TLSConnection
        do {
            connection = try TLSConnection.connect(host: input.host, port: input.port, context: context, timeout: 10, cancellation: nil, proxy: input.proxy)
        } catch {
            let trust = error.isCredentialOrTrustFailure
            checks.append(.failed("route", trust ? .credentials : .route,
                                  "\(input.host):\(input.port)\(via): \(error)" + (trust && input.ca == nil ? " (the system's trust store; --ca names another)" : "")))
            return checks
        }
        defer { connection.close() }
        guard connection.negotiatedProtocol == "h2" else {
            checks.append(.failed("route", .route, "\(input.host):\(input.port)\(via) does not speak HTTP/2 (ALPN h2): it is not APNs' provider API."))
            return checks
        }
        let root = connection.verifiedChainRoot.map { ", its chain ending in \($0)" } ?? ""
        checks.append(.ok("route", "\(input.host):\(input.port)\(via): TLS and HTTP/2\(root), trusted by \(input.ca ?? "the system's trust store")."))

        guard input.probe else {
            checks.append(.ok("probe", "Not asked (--probe sends one request to a device token that cannot exist, which APNs answers about the credentials alone)."))
            return checks
        }
        checks += probe(connection: connection, input: input, topic: topic ?? certificateTopic, pushType: pushType)
        return checks
    }

    /// One request to a token that cannot exist: 400 BadDeviceToken says the
    /// credentials and topic were taken; 403 says why they were not.
    static func probe(connection: TLSConnection, input: DoctorInput, topic: String?, pushType: String) -> [DoctorCheck] {
        var checks: [DoctorCheck] = []
        let authorization: String?
        if let authKey = input.authKey {
            guard let source = try? ProviderTokenSource(keyPath: authKey, keyID: input.keyID ?? "", teamID: input.teamID ?? "",
                                                        cachePath: input.tokenCache.map { ProviderTokenSource.sharedCachePath(directory: $0, keyID: input.keyID ?? "") })
            else { return [.failed("probe", .credentials, "The token key \(authKey) cannot sign a provider token.")] }
            authorization = "bearer " + source.current().text
        } else {
            authorization = nil
        }
        var headers: [(String, String)] = [(":method", "POST"), (":scheme", "https"),
                                           (":path", "/3/device/" + String(repeating: "0", count: 64)),
                                           (":authority", input.port == 443 ? input.host : "\(input.host):\(input.port)"),
                                           ("apns-push-type", pushType), ("apns-priority", "5"), ("apns-expiration", "0")]
        if let topic { headers.append(("apns-topic", topic)) }
        if let authorization { headers.append(("authorization", authorization)) }
        let answer: (status: Int, reason: String?, date: String?)
        do {
            answer = try exchange(connection, headers: headers, body: Array(#"{"aps":{"content-available":1}}"#.utf8))
        } catch {
            return [.failed("probe", .route, "The probe request got no answer: \(error)")]
        }
        if let date = answer.date, let server = httpDate(date) {
            let skew = input.now.timeIntervalSince(server)
            checks.append(abs(skew) > clockWarningSeconds
                ? .warning("clock", "This machine's clock is \(Int(abs(skew))) s \(skew > 0 ? "ahead of" : "behind") the server's: provider tokens may be refused (InvalidProviderToken); set it right (NTP).")
                : .ok("clock", "This machine's clock is within \(Int(abs(skew).rounded(.up))) s of the server's."))
        } else {
            checks.append(.ok("clock", "Not compared: the server's answer had no date."))
        }
        switch (answer.status, answer.reason) {
        case (400, "BadDeviceToken"?):
            checks.append(.ok("probe", "APNs took the credentials\(topic.map { " for \($0)" } ?? ""): 400 BadDeviceToken for a token that cannot exist, as it should."))
        case (403, let reason):
            checks.append(.failed("probe", .credentials, "APNs refused the credentials: 403 \(reason ?? "(no reason)")\(reason == "InvalidProviderToken" ? ": the key id, team id and key do not belong together" : "")."))
        case (400, "MissingTopic"?):
            checks.append(.warning("probe", "The probe needs the app's topic (bundle id) with token authentication: give --topic, --job or --plan."))
        case (let status, let reason):
            checks.append(.warning("probe", "An answer APNs gives for something other than the credentials: \(status) \(reason ?? "(no reason)")."))
        }
        return checks
    }

    private static func exchange(_ connection: TLSConnection, headers: [(String, String)], body: [UInt8]) throws -> (status: Int, reason: String?, date: String?) {
        let session = try H2Session(role: .client, settings: [(id: 2, value: 0)])
        let stream = try session.submitRequest(headers: headers.map { H2Session.Header($0.0, $0.1) }, body: body)
        let deadline = Deadline.after(seconds: 15)
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            var out: [UInt8] = []
            try session.send(into: &out)
            if !out.isEmpty { try connection.write(out, deadline: deadline) }
            let n = try connection.read(into: &buffer, cancellation: nil, deadline: deadline)
            guard n > 0 else { throw TLSError(.connectionReset(reason: "the gateway closed the connection")) }
            try session.receive(buffer, count: n)
            for event in session.drainEvents() {
                if case .message(let s, let fields, let responseBody) = event, s == stream {
                    let status = Int(fields.first { $0.name == ":status" }?.value ?? "") ?? 0
                    let reason = (try? JSONValue.parse(responseBody))?["reason"]?.stringValue
                    return (status, reason, fields.first { $0.name == "date" }?.value)
                }
                if case .streamClosed(let s, let code) = event, s == stream, code != 0 {
                    throw TLSError(.connectionReset(reason: "the gateway reset the request (\(H2Session.ErrorCode.name(code)))"))
                }
            }
        }
    }

    static func httpDate(_ text: String) -> Date? {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(secondsFromGMT: 0)
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.date(from: text)
    }

    static func day(_ date: Date) -> String { String(utcDay(Int64(date.timeIntervalSince1970))) }

    private static func utcDay(_ seconds: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(secondsFromGMT: 0)
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    static func freeSpace(_ path: String) -> Int64? {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        return Int64(s.f_bavail) * Int64(s.f_frsize)
    }

    static func megabytes(_ bytes: Int64) -> String {
        if bytes < 10_000 { return "\(bytes) bytes" }
        if bytes < 1_000_000 { return String(format: "%.1f kB", Double(bytes) / 1000) }
        return String(format: "%.1f MB", Double(bytes) / 1_000_000)
    }

    static func durationText(_ seconds: Int) -> String {
        let parts = [(seconds / 86_400, "d"), (seconds % 86_400 / 3600, "h"), (seconds % 3600 / 60, "min"), (seconds % 60, "s")]
            .filter { $0.0 != 0 }.map { "\($0.0) \($0.1)" }
        return parts.isEmpty ? "0 s" : parts.joined(separator: " ")
    }
}
