import APNSWire
import CampaignIO

/// The broadcast channels the simulator has issued, shared by the management
/// listener (which creates, reads, lists and deletes them) and the device
/// listener (whose `/4/broadcasts` route looks them up). Thread-safe: every
/// connection runs on its own thread.
///
/// Kept per environment because Apple keeps them so (a development channel
/// does not exist in production, and each has its own limit, reference §1);
/// one simulator serves one environment, but the store does not assume it.
public final class ChannelStore: @unchecked Sendable {
    /// A channel's life: deleted ids stay known so that they are never issued
    /// again and are answered ChannelNotRegistered, as Apple answers them.
    public enum State: Equatable, Sendable {
        case live
        case deleted
    }

    public struct Channel: Equatable, Sendable {
        public var bundleID: String
        public var policy: Broadcast.StoragePolicy
        public var state: State
    }

    /// What a create did.
    public enum Creation: Equatable, Sendable {
        case created(ChannelID)
        /// The app already has `limit` live channels in this environment.
        case limitReached
    }

    /// Live channels an app may have in one environment.
    public let limit: Int
    /// Bytes in a new id unless told: 16 random bytes, 24 base64 characters
    /// (Apple states no length, so clients must not assume this one).
    public static let defaultIDBytes = 16
    /// Bytes in each id this store issues.
    public let idBytes: Int

    private let lock = Lock()
    /// One environment's channels, and the live ones per app (so a create
    /// near the limit does not count 10,000 channels each time).
    private struct Environment {
        var channels: [ChannelID: Channel] = [:]
        var live: [String: Int] = [:]
    }
    private var environments: [String: Environment] = [:]
    private var rng: any RandomNumberGenerator

    /// `rng` draws the ids; tests may pass a seeded one.
    public init(limit: Int = Broadcast.channelLimit, idBytes: Int = ChannelStore.defaultIDBytes,
                rng: any RandomNumberGenerator = SystemRandomNumberGenerator()) {
        self.limit = limit
        self.idBytes = idBytes
        self.rng = rng
    }

    /// Creates a channel for `bundleID`, unless the app is at its limit.
    public func create(environment: String, bundleID: String, policy: Broadcast.StoragePolicy) -> Creation {
        lock.withLock {
            // Changed in place: a copy of the environment taken out and put
            // back copied every channel, each create (50,000 took 42 s).
            if environments[environment] == nil { environments[environment] = Environment() }
            // The limit counts live channels: deleting one frees its place (§1).
            guard environments[environment]!.live[bundleID, default: 0] < limit else { return .limitReached }
            var id: ChannelID
            repeat {
                id = ChannelID(bytes: (0..<idBytes).map { _ in UInt8.random(in: 0...255, using: &rng) })
            } while environments[environment]!.channels[id] != nil   // never reissued, not even after a delete
            environments[environment]!.channels[id] = Channel(bundleID: bundleID, policy: policy, state: .live)
            environments[environment]!.live[bundleID, default: 0] += 1
            return .created(id)
        }
    }

    /// The live channel `id` of `bundleID`; nil when it was never issued, was
    /// deleted, or belongs to another app or environment.
    public func channel(environment: String, bundleID: String, id: ChannelID) -> Channel? {
        lock.withLock {
            guard let channel = environments[environment]?.channels[id], channel.state == .live, channel.bundleID == bundleID else { return nil }
            return channel
        }
    }

    /// Deletes the live channel `id` of `bundleID`; whether there was one.
    public func delete(environment: String, bundleID: String, id: ChannelID) -> Bool {
        lock.withLock {
            guard let channel = environments[environment]?.channels[id], channel.state == .live, channel.bundleID == bundleID else { return false }
            environments[environment]?.channels[id]?.state = .deleted
            environments[environment]?.live[bundleID, default: 1] -= 1
            return true
        }
    }

    /// The live channels of `bundleID`, in base64 order (a stable listing).
    public func list(environment: String, bundleID: String) -> [ChannelID] {
        lock.withLock {
            (environments[environment]?.channels ?? [:]).filter { $0.value.bundleID == bundleID && $0.value.state == .live }
                .map(\.key).sorted { $0.base64 < $1.base64 }
        }
    }

    /// Channels ever created, and those deleted, over every environment: for the statistics.
    public func counts() -> (created: Int, deleted: Int) {
        lock.withLock {
            let all = environments.values.flatMap(\.channels.values)
            return (all.count, all.filter { $0.state == .deleted }.count)
        }
    }
}
