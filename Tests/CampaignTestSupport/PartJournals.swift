import PlanStream
import SendJournal

/// Journals of plan parts, as sends write them, for tests of what parts see
/// of each other (a campaign's rate) and of what `status` tells of them.
public enum PartJournals {
    /// Part `index` of `count`'s plan header: an HTTP/2 job throttled to `throttlePerMinute`.
    public static func header(_ index: Int, of count: Int = 3, hash: String, throttlePerMinute: Int = 54_000) -> PlanHeader {
        var header = PlanHeader(campaign: "paced", wire: .http2, expiry: 0, priority: nil, maxPayload: 4096, shards: count, created: 1,
                                part: PlanPart(index: index, count: count, campaignHash: hash))
        header.http2 = .init(topic: "com.example.campaign", pushType: "alert", collapseId: nil)
        header.throttlePerMinute = throttlePerMinute
        return header
    }

    /// A send's settings for part `index` (`rateTotal`: its `--rate-total`).
    public static func settings(_ index: Int, rateTotal: Int? = nil) -> SendSettings {
        var settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "c.pem")
        settings.planPath = "/nonexistent/part-\(index).plan"
        settings.rateTotal = rateTotal
        return settings
    }

    /// Starts part `index`'s journal in `directory`: it holds the journal's lock (its send runs) until released.
    public static func start(_ index: Int, of count: Int = 3, in directory: String, hash: String, rateTotal: Int? = nil) throws -> Journal {
        try Journal.create(directory: directory, settings: settings(index, rateTotal: rateTotal), planHeader: header(index, of: count, hash: hash).json)
    }
}
