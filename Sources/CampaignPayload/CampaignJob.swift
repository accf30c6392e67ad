import APNSWire
import CampaignIO
import CampaignJSON

/// A job file that cannot be used, naming the file and the key.
public struct JobError: Error, Equatable, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "\(path): \(reason)." }
}

/// A campaign job: what to send, in which languages, in which format.
///
/// ```json
/// {"campaign": "spring-sale", "format": "enhanced", "maxPayload": 256, "expiresIn": 86400,
///  "priority": 10, "fallback": ["en"],
///  "messages": {"en": {"alert": "Hi {first_name}", "sound": "default", "badge": "{badge}"}},
///  "custom": {"campaign": "spring"}}
/// ```
public struct CampaignJob: Sendable {
    public var campaign: String
    /// The job's `format`: a binary interface format, or `h2`.
    public var wire: WireProtocol
    public var maxPayload: Int
    /// Seconds after plan time; 0: the gateway should not store the notification.
    public var expiresIn: Int
    /// Frames and h2; 10 unless the job says 5 (or, h2 only, 1).
    public var priority: NotificationPriority
    /// h2: the app's bundle id (`apns-topic`); required with token authentication.
    public var topic: String?
    /// h2: `apns-push-type` (alert unless the job says otherwise).
    public var pushType: String
    /// h2: `apns-collapse-id`: literal text (at most 64 bytes), or a
    /// template of audience columns rendered per row (a row whose rendering
    /// is empty or over 64 bytes is rejected).
    public var collapseId: String?
    /// `collapseId` compiled; nil when the job has none.
    public var collapseTemplate: Template?
    public var fallback: [String]
    /// Message tags and their `aps` members, in job order.
    public var messages: [(tag: String, aps: [(key: String, value: JSONValue)])]
    /// Keys beside `aps`, in job order.
    public var custom: [(key: String, value: JSONValue)]
    /// Sample values for `campaign validate`.
    public var samples: [String: String]

    public static let knownKeys: Set<String> = [
        "campaign", "format", "maxPayload", "expiresIn", "priority", "fallback", "messages", "custom", "samples",
        "topic", "pushType", "collapseId",
    ]

    /// The push types of the HTTP/2 provider API.
    public static let pushTypes = ["alert", "background", "voip", "location", "complication", "fileprovider", "mdm",
                                   "liveactivity", "pushtotalk"]

    /// Reads and checks a job file.
    public static func load(path: String) throws(JobError) -> CampaignJob {
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path, limit: 16 << 20) } catch { throw JobError(path: path, reason: error.reason) }
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes)
        } catch {
            let line = bytes.prefix(error.offset).reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) }
            throw JobError(path: path, reason: "line \(line): invalid JSON: \(error.reason)")
        }
        return try CampaignJob(json: value, path: path)
    }

    public init(json: JSONValue, path: String) throws(JobError) {
        func fail(_ reason: String) -> JobError { JobError(path: path, reason: reason) }
        guard let top = json.objectMembers else { throw fail("the job must be a JSON object") }
        for (key, _) in top where !Self.knownKeys.contains(key) {
            throw fail("unknown key \"\(key)\" (known: \(Self.knownKeys.sorted().joined(separator: ", ")))")
        }
        guard let campaign = json["campaign"]?.stringValue, !campaign.isEmpty,
              campaign.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0) }),
              !campaign.hasPrefix(".") else {
            throw fail("\"campaign\" must be a name of letters, digits, '.', '_' and '-' (it names output directories)")
        }
        self.campaign = campaign

        switch json["format"] {
        case nil: wire = .binary(.enhanced)
        case .string(let name)?:
            guard let w = WireProtocol(name: name) else { throw fail("\"format\" must be \"simple\", \"enhanced\", \"frame\" or \"h2\", not \"\(name)\"") }
            wire = w
        case let other?: throw fail("\"format\" must be a string, not \(other.typeName)")
        }

        func integer(_ key: String, default value: Int, range: ClosedRange<Int>) throws(JobError) -> Int {
            guard let v = json[key] else { return value }
            guard let n = v.integerValue, range.contains(Int(n)) else {
                throw fail("\"\(key)\" must be a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return Int(n)
        }
        let isHTTP2 = wire.isHTTP2
        func string(_ key: String) throws(JobError) -> String? {
            guard let v = json[key] else { return nil }
            guard let text = v.stringValue else { throw fail("\"\(key)\" must be a string, not \(v.typeName)") }
            guard isHTTP2 else { throw fail("\"\(key)\" is for the HTTP/2 provider API: it goes with \"format\": \"h2\"") }
            return text
        }
        topic = try string("topic")
        if let topic, topic.isEmpty || topic.contains(where: { $0.isWhitespace }) { throw fail("\"topic\" must be a bundle id such as com.example.app") }
        pushType = try string("pushType") ?? "alert"
        guard Self.pushTypes.contains(pushType) else { throw fail("\"pushType\" must be one of \(Self.pushTypes.joined(separator: ", ")), not \"\(pushType)\"") }
        collapseId = try string("collapseId")
        collapseTemplate = nil
        if let c = collapseId {
            do { collapseTemplate = try Template(c) } catch { throw fail("\"collapseId\": \(error.reason)") }
            if collapseTemplate!.isLiteral, c.isEmpty || c.utf8.count > 64 { throw fail("\"collapseId\" must be 1 to 64 bytes (APNs refuses longer ones)") }
        }
        // HTTP/2: 4096 bytes, 5120 for VoIP.
        let payloadLimit = isHTTP2 ? (pushType == "voip" ? 5120 : 4096) : wire.maxPayloadBytes
        maxPayload = try integer("maxPayload", default: isHTTP2 ? payloadLimit : 256, range: 1...payloadLimit)
        expiresIn = try integer("expiresIn", default: 86_400, range: 0...(366 * 86_400 * 10))
        let p = try integer("priority", default: pushType == "background" ? 5 : 10, range: 0...255)
        guard p == 10 || p == 5 || (p == 1 && isHTTP2) else {
            throw fail(isHTTP2 ? "\"priority\" must be 10 (immediate), 5 (conserve power) or 1 (lowest)" : "\"priority\" must be 10 (immediate) or 5 (conserve power)")
        }
        if isHTTP2, pushType == "background", p == 10 { throw fail("\"priority\" 10 is refused by APNs for background pushes: use 5 or 1") }
        priority = NotificationPriority(rawValue: UInt8(p))

        guard let messageMembers = json["messages"]?.objectMembers, !messageMembers.isEmpty else {
            throw fail("\"messages\" must be an object with at least one language, e.g. {\"en\": {\"alert\": \"Hi\"}}")
        }
        var messages: [(tag: String, aps: [(key: String, value: JSONValue)])] = []
        var normalizedTags = Set<String>()
        for (tag, message) in messageMembers {
            guard let parsed = LanguageTag(tag) else { throw fail("messages: \"\(tag)\" is not a language tag") }
            guard normalizedTags.insert(parsed.normalized).inserted else {
                throw fail("messages: \"\(tag)\" names the same language as another message")
            }
            guard let aps = message.objectMembers else { throw fail("messages.\(tag) must be an object of aps keys") }
            try Self.check(aps: aps, at: "messages.\(tag)", fail: fail)
            if wire == .binary(.frame), priority == .immediate,
               aps.allSatisfy({ $0.key == "content-available" }) {
                throw fail("messages.\(tag): priority 10 needs an alert, sound or badge; a content-available-only push must use priority 5")
            }
            messages.append((tag, aps))
        }
        self.messages = messages

        switch json["fallback"] {
        case nil: fallback = []
        case .array(let items)?:
            fallback = []
            for item in items {
                guard let tag = item.stringValue, LanguageTag(tag) != nil else { throw fail("\"fallback\" must list language tags") }
                fallback.append(tag)
            }
        case let other?: throw fail("\"fallback\" must be an array of language tags, not \(other.typeName)")
        }
        let selector = MessageSelector(tags: messages.map { LanguageTag($0.tag)! }, fallback: [])
        for tag in fallback where selector.match(LanguageTag(tag)!) == nil {
            throw fail("fallback \"\(tag)\" has no message in \"messages\"")
        }

        switch json["custom"] {
        case nil: custom = []
        case .object(let members)?:
            if members.contains(where: { $0.key == "aps" }) { throw fail("\"custom\" must not contain \"aps\"") }
            custom = members
            for (key, value) in members { try Self.checkTemplates(value, at: "custom.\(key)", fail: fail) }
        case let other?: throw fail("\"custom\" must be an object, not \(other.typeName)")
        }

        samples = [:]
        if let sampleMembers = json["samples"]?.objectMembers {
            for (key, value) in sampleMembers {
                guard case .string(let s) = value else { throw fail("samples.\(key) must be a string") }
                samples[key] = s
            }
        }
    }

    private static func check(
        aps: [(key: String, value: JSONValue)], at path: String, fail: (String) -> JobError
    ) throws(JobError) {
        for (key, value) in aps {
            let here = "\(path).\(key)"
            switch key {
            case "alert":
                switch value {
                case .string: try checkTemplates(value, at: here, fail: fail)
                case .object(let members):
                    for (k, v) in members {
                        switch (k, v) {
                        case ("loc-args", .array(let args)):
                            guard args.allSatisfy({ $0.stringValue != nil }) else { throw fail("\(here).loc-args must be an array of strings") }
                        case ("loc-args", _): throw fail("\(here).loc-args must be an array of strings")
                        case ("action-loc-key", .null): break
                        case (_, .string): break
                        default: throw fail("\(here).\(k) must be a string")
                        }
                        try checkTemplates(v, at: "\(here).\(k)", fail: fail)
                    }
                    if members.isEmpty { throw fail("\(here) must not be empty") }
                default: throw fail("\(here) must be a string or an object (body, loc-key, loc-args, action-loc-key, launch-image)")
                }
            case "badge":
                switch value {
                case .number(let text): guard let n = Int(text), n >= 0 else { throw fail("\(here) must be a whole number of at least 0") }
                case .string(let text):
                    let template: Template
                    do { template = try Template(text) } catch { throw fail("\(here): \(error.reason)") }
                    let single: Bool
                    if template.parts.count == 1, case .variable = template.parts[0] { single = true } else { single = false }
                    let literal = Int(Substring(text).trimmingWhitespace()).map { $0 >= 0 } ?? false
                    guard single || literal else { throw fail("\(here) must be a whole number or exactly one \"{variable}\"") }
                default: throw fail("\(here) must be a number or a \"{variable}\" template")
                }
            case "sound":
                guard case .string = value else { throw fail("\(here) must be a string") }
                try checkTemplates(value, at: here, fail: fail)
            case "content-available":
                guard value == .number("1") else { throw fail("\(here) must be 1") }
            default:
                try checkTemplates(value, at: here, fail: fail)
            }
        }
        if aps.isEmpty { throw fail("\(path) must have at least one aps key (alert, sound, badge, content-available)") }
    }

    static func checkTemplates(_ value: JSONValue, at path: String, fail: (String) -> JobError) throws(JobError) {
        switch value {
        case .string(let s):
            do { _ = try Template(s) } catch { throw fail("\(path): \(error.reason)") }
        case .array(let items):
            for (i, item) in items.enumerated() { try checkTemplates(item, at: "\(path)[\(i)]", fail: fail) }
        case .object(let members):
            for (k, v) in members { try checkTemplates(v, at: "\(path).\(k)", fail: fail) }
        default: break
        }
    }

    /// The message selector for device languages.
    public var selector: MessageSelector {
        MessageSelector(tags: messages.map { LanguageTag($0.tag)! }, fallback: fallback.compactMap { LanguageTag($0) })
    }
}
