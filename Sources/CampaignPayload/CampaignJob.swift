import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import LocalTime
import SendLedger
import ByteStreams

/// A job file that cannot be used, naming the file and the key.
public struct JobError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong; tests match these, the sentence is ``description``'s.
    public enum Reason: Equatable, Sendable {
        /// The file cannot be read (the reading error's words).
        case unreadable(String)
        case invalidJSON(line: Int, detail: String)
        case notAnObject
        case unknownKey(String, known: [String])
        /// A key's value breaks one of the job's rules; the sentence names the key and the rule.
        case brokenRule(String)
        /// A column mapping names a variable the job does not use (a typo would leave every row without it).
        case unmappedName(String, mappable: [String])
        /// `--max-payload` outside what the protocol allows.
        case maxPayloadOutOfRange(bytes: Int, wire: WireProtocol)
        /// `--parts` more than the plan's shards.
        case partsOutOfRange(parts: Int, shards: Int)
        /// A schedule's `defaultTimeZone` that the tz database lacks.
        case unknownTimeZone(String, database: String)

        /// The reason in words, after the path.
        public var sentence: String {
            switch self {
            case .unreadable(let why): why
            case .invalidJSON(let line, let detail): "line \(line): invalid JSON: \(detail)"
            case .notAnObject: "the job must be a JSON object"
            case .unknownKey(let key, let known): "unknown key \"\(key)\" (known: \(known.joined(separator: ", ")))"
            case .brokenRule(let sentence): sentence
            case .unmappedName(let name, let mappable): "\"\(name)\" is not a name the job uses (it maps: \(mappable.joined(separator: ", ")))"
            case .maxPayloadOutOfRange(let bytes, let wire): "\(bytes) bytes is outside 1...\(wire.maxPayloadBytes) for the \(wire) format"
            case .partsOutOfRange(let parts, let shards): "\(parts) parts cannot be made of \(shards) shards (a part is a set of whole shards)"
            case .unknownTimeZone(let name, let database): "\"\(name)\" is not a zone of the tz database at \(database)"
            }
        }
    }

    public var path: String
    public var reason: Reason

    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "\(path): \(reason.sentence)." }
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
    /// The fallback chain of every language (the array form, or the object form's `"*"`).
    public var fallback: [String]
    /// The object form's chains of their own, by normalized language tag.
    public var fallbackByLanguage: [String: [String]] = [:]
    /// A broadcast that names no fallback: every channel whose row has no
    /// message of its own gets the job's first message.
    public var fallbackIsTheFirstMessage = false
    /// Message tags and their `aps` members, in job order.
    public var messages: [(tag: String, aps: [(key: String, value: JSONValue)])]
    /// Keys beside `aps`, in job order.
    public var custom: [(key: String, value: JSONValue)]
    /// Sample values for `campaign validate`.
    public var samples: [String: String]
    /// Our names (token, lang, registered_at, tz, variables) → the export's columns.
    public var columns: ColumnMapping
    /// `deliverAt` or `quietHours`: when each device may be reached, by its own
    /// clock (its `tz` column); nil: everything is sent as soon as the send runs.
    public var schedule: DeliverySchedule?
    /// `"broadcast": true`: a Live Activity update per channel of the audience
    /// (its `channel_id` column), sent to `/4/broadcasts/apps/<topic>`; see CampaignJob+Broadcast.
    public var broadcast = false
    /// `variants`: shares of the audience with messages of their own, or held out (see CampaignJob+Variants).
    public var variants: [JobVariant] = []
    /// `frequencyCap`: at most `max` notifications of the job's scope per device per window (CampaignJob+Rules).
    public var frequencyCap: FrequencyCap? = nil
    /// `"throttle": {"perMinute": N}`: the campaign's rate over all its parts (CampaignJob+Rules).
    public var throttlePerMinute: Int? = nil

    /// The rule a job without messages breaks (checked after every field but its messages).
    static let noMessagesRule = "\"messages\" must be an object with at least one language, e.g. {\"en\": {\"alert\": \"Hi\"}}"

    public static let knownKeys: Set<String> = [
        "campaign", "format", "maxPayload", "expiresIn", "priority", "fallback", "messages", "custom", "samples",
        "topic", "pushType", "collapseId", "columns", "deliverAt", "quietHours", "broadcast", "frequencyCap",
        "variants", "throttle",
    ]

    /// The push types of the HTTP/2 provider API.
    public static let pushTypes = ["alert", "background", "voip", "location", "complication", "fileprovider", "mdm",
                                   "liveactivity", "pushtotalk", "controls", "widgets"]

    /// Reads and checks a job file.
    public static func load(path: String) throws(JobError) -> CampaignJob {
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path, limit: 16 << 20) } catch { throw JobError(path: path, reason: .unreadable(error.reason)) }
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes)
        } catch {
            let line = bytes.prefix(error.offset).reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) }
            throw JobError(path: path, reason: .invalidJSON(line: line, detail: error.reason))
        }
        return try CampaignJob(json: value, path: path)
    }

    public init(json: JSONValue, path: String) throws(JobError) {
        func fail(_ rule: String) -> JobError { JobError(path: path, reason: .brokenRule(rule)) }
        guard let top = json.objectMembers else { throw JobError(path: path, reason: .notAnObject) }
        for (key, _) in top where !Self.knownKeys.contains(key) {
            throw JobError(path: path, reason: .unknownKey(key, known: Self.knownKeys.sorted()))
        }
        if json["variants"] != nil { self = try Self(variantsJSON: json, path: path); return }
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
        // A broadcast job without `"format": "h2"` is told that, not that its other HTTP/2 keys are out of place.
        if json["broadcast"] == .bool(true), !isHTTP2 { throw fail(Self.notOverHTTP2) }
        topic = try string("topic")
        if let topic, topic.isEmpty || topic.contains(where: { $0.isWhitespace }) { throw fail("\"topic\" must be a bundle id such as com.example.app") }
        pushType = try string("pushType") ?? "alert"
        broadcast = try Self.isBroadcast(json, isHTTP2: isHTTP2, pushType: pushType, fail: fail)
        guard Self.pushTypes.contains(pushType) else { throw fail("\"pushType\" must be one of \(Self.pushTypes.joined(separator: ", ")), not \"\(pushType)\"") }
        // Apple's rule: some push types go to the bundle id with a suffix.
        if let given = topic {
            switch PushTopic.resolve(given, for: pushType) {
            // A broadcast's path names the bundle id itself; a suffix there is TopicDisallowed.
            case .topic(let sent): topic = broadcast ? String(sent.dropLast(PushTopic.suffix(for: pushType).count)) : sent
            case .otherTypesSuffix(let other):
                let bundle = String(given.dropLast(PushTopic.suffix(for: other).count))
                throw fail("\"topic\" \"\(given)\" is for \(other) pushes; a \(pushType) push goes to \(bundle + PushTopic.suffix(for: pushType)) (give the bundle id, \(bundle), and the suffix is added)")
            }
        }
        collapseId = try string("collapseId")
        collapseTemplate = nil
        if let c = collapseId {
            do { collapseTemplate = try Template(c) } catch { throw fail("\"collapseId\": \(error.reason)") }
            if let typed = collapseTemplate!.typedVariable { throw fail("\"collapseId\" is a header's text: \(typed.source) has a type (write {\(typed.name)})") }
            if collapseTemplate!.isLiteral, c.isEmpty || c.utf8.count > 64 { throw fail("\"collapseId\" must be 1 to 64 bytes (APNs refuses longer ones)") }
        }
        // HTTP/2: 4096 bytes, 5120 for VoIP.
        let payloadLimit = isHTTP2 ? (pushType == "voip" || broadcast ? 5120 : 4096) : wire.maxPayloadBytes
        maxPayload = try integer("maxPayload", default: isHTTP2 ? payloadLimit : 256, range: 1...payloadLimit)
        // A broadcast is stored only when asked: a channel that stores no messages refuses any other expiration.
        expiresIn = try integer("expiresIn", default: broadcast ? 0 : Self.defaultExpiresIn(pushType: pushType), range: 0...(366 * 86_400 * 10))
        let p = try integer("priority", default: pushType == "background" ? 5 : 10, range: 0...255)
        guard p == 10 || p == 5 || (p == 1 && isHTTP2) else {
            throw fail(isHTTP2 ? "\"priority\" must be 10 (immediate), 5 (conserve power) or 1 (lowest)" : "\"priority\" must be 10 (immediate) or 5 (conserve power)")
        }
        if isHTTP2, pushType == "background", p == 10 { throw fail("\"priority\" 10 is refused by APNs for background pushes: use 5 or 1") }
        try Self.checkPushTypeHeaders(pushType, priority: p, expiresIn: expiresIn, custom: json["custom"], fail: fail)
        priority = NotificationPriority(rawValue: UInt8(p))

        guard let messageMembers = json["messages"]?.objectMembers, !messageMembers.isEmpty else { throw fail(Self.noMessagesRule) }
        var messages: [(tag: String, aps: [(key: String, value: JSONValue)])] = []
        var normalizedTags = Set<String>()
        for (tag, message) in messageMembers {
            guard let parsed = LanguageTag(tag) else { throw fail("messages: \"\(tag)\" is not a language tag") }
            guard normalizedTags.insert(parsed.normalized).inserted else {
                throw fail("messages: \"\(tag)\" names the same language as another message")
            }
            guard let aps = message.objectMembers else { throw fail("messages.\(tag) must be an object of aps keys") }
            // A Push to Talk payload may be custom keys alone (Apple's example: {"activeSpeaker": …}).
            try Self.check(aps: aps, at: "messages.\(tag)", allowEmpty: pushType == "pushtotalk" && json["custom"]?.objectMembers?.isEmpty == false, fail: fail)
            if broadcast { try Self.checkBroadcast(aps, at: "messages.\(tag)", fail: fail) }
            try Self.checkPushType(pushType, aps: aps, at: "messages.\(tag)", fail: fail)
            if wire == .binary(.frame), priority == .immediate,
               aps.allSatisfy({ $0.key == "content-available" }) {
                throw fail("messages.\(tag): priority 10 needs an alert, sound or badge; a content-available-only push must use priority 5")
            }
            messages.append((tag, aps))
        }
        self.messages = messages

        let selector = MessageSelector(tags: messages.map { LanguageTag($0.tag)! }, fallback: [])
        func chain(_ value: JSONValue, at path: String) throws(JobError) -> [String] {
            let named = path == "fallback" ? "\"fallback\"" : path
            guard case .array(let items) = value else { throw fail("\(named) must be an array of language tags, not \(value.typeName)") }
            var tags: [String] = []
            for item in items {
                guard let tag = item.stringValue, let parsed = LanguageTag(tag) else { throw fail("\(named) must list language tags") }
                guard selector.match(parsed) != nil else {
                    throw fail(path == "fallback" ? "fallback \"\(tag)\" has no message in \"messages\"" : "\(path): \"\(tag)\" has no message in \"messages\"")
                }
                tags.append(tag)
            }
            return tags
        }
        fallback = []
        switch json["fallback"] {
        case nil: break
        case .array?: fallback = try chain(json["fallback"]!, at: "fallback")
        case .object(let members)?:
            // {"pt": ["es"], "*": ["en"]}: a chain per language, "*" for the others.
            for (key, value) in members {
                if key == "*" {
                    fallback = try chain(value, at: "fallback.*")
                    continue
                }
                guard let language = LanguageTag(key) else { throw fail("fallback: \"\(key)\" is not a language tag (or \"*\" for every other)") }
                fallbackByLanguage[language.normalized] = try chain(value, at: "fallback.\(key)")
            }
        case let other?: throw fail("\"fallback\" must be an array of language tags, or an object from language to such an array, not \(other.typeName)")
        }

        // A channel's subscribers speak many languages: without a `lang`
        // column or a chain, a broadcast goes in the job's first message.
        if broadcast, fallback.isEmpty, fallbackByLanguage.isEmpty {
            fallback = [messages[0].tag]
            fallbackIsTheFirstMessage = true
        }

        switch json["custom"] {
        case nil: custom = []
        case .object(let members)?:
            if members.contains(where: { $0.key == "aps" }) { throw fail("\"custom\" must not contain \"aps\"") }
            custom = members
            for (key, value) in members { try Self.checkTemplates(value, at: "custom.\(key)", fail: fail) }
        case let other?: throw fail("\"custom\" must be an object, not \(other.typeName)")
        }

        columns = ColumnMapping()
        switch json["columns"] {
        case nil: break
        case .object(let members)?:
            for (ours, source) in members {
                guard let text = source.stringValue, !text.isEmpty else { throw fail("columns.\(ours) must name a column of the export (a string)") }
                columns.sources[ours] = text
            }
        case let other?: throw fail("\"columns\" must be an object from our names to the export's columns, not \(other.typeName)")
        }

        schedule = try Self.schedule(json, fail: fail)
        frequencyCap = try Self.frequencyCap(json, fail: fail)
        throttlePerMinute = try Self.throttle(json, fail: fail)
        columns.tokenKind = broadcast ? .channel : .device

        samples = [:]
        if let sampleMembers = json["samples"]?.objectMembers {
            for (key, value) in sampleMembers {
                guard case .string(let s) = value else { throw fail("samples.\(key) must be a string") }
                samples[key] = s
            }
        }
        if broadcast { try checkBroadcastJob(fail: fail) }
        try check(columns, origin: "\(path): columns")
    }

    private static func check(
        aps: [(key: String, value: JSONValue)], at path: String, allowEmpty: Bool = false, fail: (String) -> JobError
    ) throws(JobError) {
        for (key, value) in aps {
            let here = "\(path).\(key)"
            switch key {
            case "alert":
                switch value {
                case .string: try checkTemplates(value, at: here, textOnly: true, fail: fail)
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
                        try checkTemplates(v, at: "\(here).\(k)", textOnly: true, fail: fail)
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
                    if template.parts.count == 1, case .variable(let v) = template.parts[0] {
                        guard v.type == .text || v.type == .int else { throw fail("\(here) must be a whole number: \(v.source) is a \(v.type.rawValue)") }
                        if let d = v.defaultValue, !(Int(d.trimmingWhitespace()).map { $0 >= 0 } ?? false) {
                            throw fail("\(here): the default of \(v.source) must be a whole number of at least 0")
                        }
                        single = true
                    } else { single = false }
                    let literal = Int(Substring(text).trimmingWhitespace()).map { $0 >= 0 } ?? false
                    guard single || literal else { throw fail("\(here) must be a whole number or exactly one \"{variable}\"") }
                default: throw fail("\(here) must be a number or a \"{variable}\" template")
                }
            case "sound":
                guard case .string = value else { throw fail("\(here) must be a string") }
                try checkTemplates(value, at: here, textOnly: true, fail: fail)
            case "content-available":
                guard value == .number("1") else { throw fail("\(here) must be 1") }
            default:
                try checkTemplates(value, at: here, fail: fail)
            }
        }
        if aps.isEmpty && !allowEmpty { throw fail("\(path) must have at least one aps key (alert, sound, badge, content-available)") }
    }

    /// What APNs requires of a Live Activity's `aps`: `timestamp` (a number,
    /// or a typed variable such as "{now:int}"), `event` (update, end, or
    /// start for push-to-start), `content-state` (an object); `start` also
    /// `attributes-type` and `attributes`.
    static func checkLiveActivity(_ aps: [(key: String, value: JSONValue)], at path: String, fail: (String) -> JobError) throws(JobError) {
        func member(_ key: String) -> JSONValue? { aps.first { $0.key == key }?.value }
        let what = "a Live Activity (pushType liveactivity)"
        switch member("timestamp") {
        case .number?: break
        case .string(let s)? where (try? Template(s))?.typedVariable.map({ $0.type != .bool }) == true: break
        case nil: throw fail("\(path): \(what) needs \"timestamp\" (UNIX seconds: a number, or \"{now:int}\" for the plan's time)")
        default: throw fail("\(path).timestamp must be a number of UNIX seconds, or a typed variable such as \"{now:int}\"")
        }
        guard case .string(let event)? = member("event"), ["update", "end", "start"].contains(event) else {
            throw fail("\(path): \(what) needs \"event\": \"update\", \"end\" or \"start\"")
        }
        guard case .object? = member("content-state") else {
            throw fail("\(path): \(what) needs \"content-state\", an object (the activity's dynamic state)")
        }
        if event == "start" {
            guard case .string? = member("attributes-type") else { throw fail("\(path): a Live Activity started by push needs \"attributes-type\" (a string)") }
            guard case .object? = member("attributes") else { throw fail("\(path): a Live Activity started by push needs \"attributes\" (an object)") }
        }
        try checkPushToStart(aps, event: event, at: path, fail: fail)
    }

    /// Every string in `value` is a template; `textOnly`: none is typed (APNs reads these as text).
    static func checkTemplates(_ value: JSONValue, at path: String, textOnly: Bool = false, fail: (String) -> JobError) throws(JobError) {
        switch value {
        case .string(let s):
            let template: Template
            do { template = try Template(s) } catch { throw fail("\(path): \(error.reason)") }
            if textOnly, let typed = template.typedVariable {
                throw fail("\(path) is text: \(typed.source) would make it a \(typed.type == .bool ? "boolean" : "number") (write {\(typed.name)})")
            }
        case .array(let items):
            for (i, item) in items.enumerated() { try checkTemplates(item, at: "\(path)[\(i)]", textOnly: textOnly, fail: fail) }
        case .object(let members):
            for (k, v) in members { try checkTemplates(v, at: "\(path).\(k)", textOnly: textOnly, fail: fail) }
        default: break
        }
    }
}
