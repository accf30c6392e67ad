import CampaignJSON
import SendLedger

/// Campaign rules that read the send ledger (`plan --ledger`).
extension CampaignJob {
    /// Reads `"frequencyCap": {"max": 2, "per": "24h", "scope": "marketing"}`:
    /// no device gets more than `max` notifications of campaigns of `scope`
    /// (this job's scope) within `per` (a duration, 1 minute to 90 days).
    static func frequencyCap(_ json: JSONValue, fail: (String) -> JobError) throws(JobError) -> FrequencyCap? {
        guard let value = json["frequencyCap"] else { return nil }
        guard let members = value.objectMembers else { throw fail("\"frequencyCap\" must be an object such as {\"max\": 2, \"per\": \"24h\", \"scope\": \"marketing\"}") }
        for (k, _) in members where !["max", "per", "scope"].contains(k) {
            throw fail("frequencyCap: unknown key \"\(k)\" (known: max, per, scope)")
        }
        guard let max = value["max"]?.integerValue, (1...100).contains(max) else {
            throw fail("frequencyCap.max must be a whole number from 1 to 100 (notifications per device per window)")
        }
        let per: Int
        switch value["per"] {
        case .number(let n)?:
            guard let seconds = Int(n) else { throw fail("frequencyCap.per must be a duration (\"24h\", \"7d\") or seconds") }
            per = seconds
        case .string(let t)?:
            guard let seconds = Self.duration(t) else { throw fail("frequencyCap.per \"\(t)\" is not a duration (\"24h\", \"7d\", \"90m\", or seconds)") }
            per = seconds
        default:
            throw fail("frequencyCap needs \"per\", the window: a duration such as \"24h\"")
        }
        guard (60...90 * 86_400).contains(per) else { throw fail("frequencyCap.per must be 1 minute to 90 days (the ledger is pruned at 90 days)") }
        guard let scope = value["scope"]?.stringValue, !scope.isEmpty, scope.utf8.count <= 200 else {
            throw fail("frequencyCap needs \"scope\", the name of the campaigns that count toward the cap (such as \"marketing\")")
        }
        return FrequencyCap(max: Int(max), perSeconds: per, scope: scope)
    }

    /// Reads `"throttle": {"perMinute": 60000}`: the campaign's rate over all
    /// its parts and processes, because what it protects is the app's own
    /// backend (a push opened by millions in one minute is a load test).
    static func throttle(_ json: JSONValue, fail: (String) -> JobError) throws(JobError) -> Int? {
        guard let value = json["throttle"] else { return nil }
        guard let members = value.objectMembers else { throw fail("\"throttle\" must be an object such as {\"perMinute\": 60000}") }
        for (k, _) in members where k != "perMinute" { throw fail("throttle: unknown key \"\(k)\" (known: perMinute)") }
        guard let n = value["perMinute"]?.integerValue, (60...600_000_000).contains(n) else {
            throw fail("throttle.perMinute must be a whole number of notifications per minute, from 60 to 600,000,000")
        }
        return Int(n)
    }
}
