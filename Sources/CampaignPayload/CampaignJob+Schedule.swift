import CampaignJSON
import LocalTime

/// A job's schedule (`deliverAt` or `quietHours`) and the durations it is written with.
extension CampaignJob {
    /// Reads `deliverAt` or `quietHours` (not both).
    static func schedule(_ json: JSONValue, fail: (String) -> JobError) throws(JobError) -> DeliverySchedule? {
        let deliverAt = json["deliverAt"], quiet = json["quietHours"]
        if deliverAt != nil, quiet != nil {
            throw fail("\"deliverAt\" and \"quietHours\" cannot go together: a deliverAt moment is already chosen by each device's clock")
        }
        guard let value = deliverAt ?? quiet else { return nil }
        let key = deliverAt != nil ? "deliverAt" : "quietHours"
        guard let members = value.objectMembers else { throw fail("\"\(key)\" must be an object") }
        let known: Set<String> = deliverAt != nil ? ["localTime", "date", "window", "defaultTimeZone", "late"] : ["from", "to", "defaultTimeZone"]
        for (k, _) in members where !known.contains(k) {
            throw fail("\(key): unknown key \"\(k)\" (known: \(known.sorted().joined(separator: ", ")))")
        }
        func text(_ k: String) throws(JobError) -> String? {
            guard let v = value[k] else { return nil }
            guard let t = v.stringValue else { throw fail("\(key).\(k) must be a string, not \(v.typeName)") }
            return t
        }
        func clock(_ k: String) throws(JobError) -> TimeOfDay {
            guard let t = try text(k) else { throw fail("\(key) needs \"\(k)\", a local time such as \"09:00\"") }
            guard let time = TimeOfDay(text: t) else { throw fail("\(key).\(k) \"\(t)\" is not a time of day (HH:MM, 00:00 to 23:59)") }
            return time
        }
        var zone = try text("defaultTimeZone") ?? "UTC"
        let database = ZoneDatabase()
        switch database.zone(named: zone) {
        case .zone(let rules):
            // `utc` or `america/new_york`: the database's own name.
            if rules.name != zone, rules.name.lowercased() == zone.lowercased() { zone = rules.name }
        case .unknown where !database.isInstalled:
            throw fail("\(key).defaultTimeZone \"\(zone)\" cannot be read: the tz database is not installed at \(database.directory) (Debian: apt-get install tzdata, or make deps-runtime)")
        case .unknown, .invalid:
            throw fail("\(key).defaultTimeZone \"\(zone)\" is not a time zone (an IANA name such as America/New_York, or an offset such as +05:30)")
        }
        if quiet != nil {
            let from = try clock("from"), to = try clock("to")
            guard from != to else { throw fail("quietHours.from and quietHours.to are the same time: the quiet hours would be empty") }
            return .quietHours(QuietHours(from: from, to: to, defaultZone: zone))
        }
        let localTime = try clock("localTime")
        var date: CivilDate? = nil
        if let d = try text("date") {
            guard let parsed = CivilDate(iso: d) else { throw fail("deliverAt.date \"\(d)\" is not a date (YYYY-MM-DD)") }
            date = parsed
        }
        var window = 3 * 3600
        switch value["window"] {
        case nil: break
        case .number(let n)?:
            guard let seconds = Int(n), (0...7 * 86_400).contains(seconds) else { throw fail("deliverAt.window must be 0 to 7 days") }
            window = seconds
        case .string(let t)?:
            guard let seconds = Self.duration(t), seconds <= 7 * 86_400 else {
                throw fail("deliverAt.window \"\(t)\" is not a duration of at most 7 days (\"3h\", \"90m\", \"1h30m\", \"45s\", or seconds)")
            }
            window = seconds
        case let other?: throw fail("deliverAt.window must be a duration such as \"3h\", not \(other.typeName)")
        }
        let lateText = try text("late") ?? "send"
        guard let late = LatePolicy(rawValue: lateText) else { throw fail("deliverAt.late must be \"send\" or \"skip\", not \"\(lateText)\"") }
        return .deliverAt(DeliverAt(localTime: localTime, date: date, windowSeconds: window, defaultZone: zone, late: late))
    }

    /// `3h`, `90m`, `1h30m`, `45s`, `2d`, or plain seconds (a job's windows and caps, `ledger prune --older-than`).
    public static func duration(_ text: String) -> Int? {
        if let n = Int(text), n >= 0 { return n }
        var total = 0, number = "", units = 0
        for c in text {
            if c.isASCII, c.isNumber { number.append(c); continue }
            guard let n = Int(number) else { return nil }
            switch c {
            case "d": total += n * 86_400
            case "h": total += n * 3600
            case "m": total += n * 60
            case "s": total += n
            default: return nil
            }
            number = ""
            units += 1
        }
        return number.isEmpty && units > 0 ? total : nil
    }
}
