import CampaignJSON

/// One variant's counts in a send (every run of it): records planned (read
/// from the plan), accepted (with the simple format's presumed delivered)
/// and failed for good. A holdout has no records: the send does not list it.
public struct VariantCounts: Equatable, Sendable {
    public var name: String
    public var planned = 0
    public var accepted = 0
    public var failed = 0
    /// Skipped (late, or by a campaign rule at release): final, not failed.
    public var skipped = 0

    public init(name: String, planned: Int = 0, accepted: Int = 0, failed: Int = 0, skipped: Int = 0) {
        (self.name, self.planned, self.accepted, self.failed, self.skipped) = (name, planned, accepted, failed, skipped)
    }

    /// `{"A":{"planned":N,"accepted":N,"failed":N,"skipped":N},…}`, in the plan's order.
    public static func json(_ list: [VariantCounts]) -> JSONValue {
        .object(list.map { v in
            (v.name, .object([("planned", .number(String(v.planned))), ("accepted", .number(String(v.accepted))), ("failed", .number(String(v.failed))),
                              ("skipped", .number(String(v.skipped)))]))
        })
    }

    /// Reads ``json(_:)``; nil when it is not that.
    public static func list(_ value: JSONValue?) -> [VariantCounts]? {
        guard let members = value?.objectMembers else { return nil }
        return members.map { name, v in
            VariantCounts(name: name, planned: Int(v["planned"]?.integerValue ?? 0), accepted: Int(v["accepted"]?.integerValue ?? 0),
                          failed: Int(v["failed"]?.integerValue ?? 0), skipped: Int(v["skipped"]?.integerValue ?? 0))
        }
    }

    /// `A 450 planned, 440 accepted, 10 failed; B …`.
    public static func text(_ list: [VariantCounts]) -> String {
        list.map { "\($0.name) \($0.planned) planned, \($0.accepted) accepted, \($0.failed) failed\($0.skipped > 0 ? ", \($0.skipped) skipped" : "")" }.joined(separator: "; ")
    }
}
