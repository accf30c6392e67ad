import APNSWire
import CampaignPlan

/// One group of an experiment: a variant that was sent, or a holdout that was not.
public struct ExperimentGroup: Equatable, Sendable {
    public var name: String
    /// The job's weight (the sample-ratio check compares against it).
    public var weight: Int
    public var holdout: Bool
    /// A variant: its plan records; a holdout: its devices held out.
    public var planned = 0
    /// A variant's records by where they stand: proven accepted (or presumed
    /// delivered), refused for good, skipped (late, or by a rule at release),
    /// and not final yet. A holdout has none of these.
    public var accepted = 0
    public var failed = 0
    public var skipped = 0
    public var pending = 0
    /// Devices whose window is measured: a variant's accepted, a holdout's
    /// held out with a moment (see ``ExperimentLoader``).
    public var population = 0
    /// Of `population`, those with at least one event counted.
    public var converted = 0

    public init(name: String, weight: Int, holdout: Bool) {
        (self.name, self.weight, self.holdout) = (name, weight, holdout)
    }
}

/// Every device of an experiment, by token: its group, and the moment its
/// window opens (the second its notification was proven accepted; for a
/// held-out device, the moment it would have had), or none when it is not
/// measured (refused, skipped, not sent yet). Sized for tens of millions:
/// tokens in one open-addressing table, the rest in flat arrays by index.
public final class ExperimentDevices {
    /// No moment: the device is in the campaign but its window is not measured.
    public static let unmeasured = Int64.min

    public private(set) var groups: [ExperimentGroup]
    private var index = TokenSet(values: true)
    private(set) var group: [UInt8] = []
    private(set) var moment: [Int64] = []
    private(set) var converted: [Bool] = []

    public init(groups: [ExperimentGroup]) {
        precondition(groups.count <= Int(UInt8.max), "at most 255 groups")
        self.groups = groups
    }

    public var count: Int { group.count }

    /// Adds a device; false (and nothing changes) when its token is already in.
    @discardableResult
    func add(token: UnsafeBufferPointer<UInt8>, group g: Int, moment m: Int64) -> Bool {
        guard index.insert(token, value: UInt32(group.count)) else { return false }
        group.append(UInt8(g))
        moment.append(m)
        converted.append(false)
        if m != Self.unmeasured { groups[g].population += 1 }
        return true
    }

    func update(_ body: (inout [ExperimentGroup]) -> Void) { body(&groups) }

    /// The device with `token`: its index, or nil when it is not in the campaign.
    @inline(__always)
    func device(_ token: UnsafeBufferPointer<UInt8>) -> Int? {
        index.value(for: token).map(Int.init)
    }

    /// Marks device `d` converted (once) and counts it in its group.
    @inline(__always)
    func markConverted(_ d: Int) {
        guard !converted[d] else { return }
        converted[d] = true
        groups[Int(group[d])].converted += 1
    }

    /// The bytes held, for the memory it reports.
    public var allocatedBytes: Int { index.allocatedBytes + group.capacity + moment.capacity * 8 + converted.capacity }
}
