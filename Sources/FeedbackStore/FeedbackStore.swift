#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import ByteStreams


/// Devices the feedback service reported (or the gateway refused with status
/// 8), with when. One entry per token; the newest timestamp wins.
///
/// File format: NDJSON, one `{"token":"hex","ts":UNIX}` per line, written to a
/// temporary file and renamed, created 0600: a crash leaves the old store.
public struct FeedbackStore {
    public private(set) var entries: [[UInt8]: UInt32] = [:]

    public init() {}

    public var count: Int { entries.count }

    /// Loads a store; a missing file is an empty store.
    public static func load(path: String) throws -> FeedbackStore {
        var store = FeedbackStore()
        guard let source = try? FileSource(path: path) else { return store }
        let lines = LineReader(source: source, maxLineBytes: 1 << 16)
        while let line = try lines.next() {
            guard case .text(let number) = line else {
                if case .overlong(let number, let count) = line {
                    throw IOError(path: path, reason: "line \(number) is \(count) bytes long, not {\"token\":\"hex\",\"ts\":UNIX seconds}")
                }
                continue
            }
            let blank = lines.withCurrentLine { $0.allSatisfy { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D } }
            if blank { continue }
            guard let value = lines.withCurrentLine({ try? JSONValue.parse($0) }),
                  let hex = value["token"]?.stringValue, let token = DeviceToken(hex: hex),
                  let ts = value["ts"]?.integerValue, ts >= 0, ts <= Int64(UInt32.max) else {
                throw IOError(path: path, reason: "line \(number) is not {\"token\":\"hex\",\"ts\":UNIX seconds}")
            }
            store.record(token: token.bytes, timestamp: UInt32(ts))
        }
        return store
    }

    /// Adds or updates an entry; returns whether the store changed.
    @discardableResult
    public mutating func record(token: [UInt8], timestamp: UInt32) -> Bool {
        if let existing = entries[token], existing >= timestamp { return false }
        entries[token] = timestamp
        return true
    }

    /// Removes entries older than `cutoff` (UNIX seconds); returns how many.
    @discardableResult
    public mutating func prune(olderThan cutoff: UInt32) -> Int {
        let before = entries.count
        entries = entries.filter { $0.value >= cutoff }
        return before - entries.count
    }

    /// The entries as NDJSON, sorted by token so the file is deterministic.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        for (token, ts) in entries.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            out.append(contentsOf: #"{"token":""#.utf8)
            HexEncoding.append(token, to: &out)
            out.append(contentsOf: #"","ts":"#.utf8)
            JSONText.appendDecimal(ts, to: &out)
            out.append(contentsOf: "}\n".utf8)
        }
        return out
    }

    /// Loads the store at `path`, lets `body` change it and saves it, holding
    /// an exclusive lock (`PATH.lock`) throughout, so the sends of several
    /// parts (and `feedback`) that share one store never lose each other's
    /// entries. The lock is held only for the load and the save (milliseconds
    /// to a second), never across network waits, so waiting for it is bounded.
    /// How long ``update(path:_:)`` waits for the store's lock.
    public static let lockWaitSeconds = 30.0

    public static func update<R>(path: String, lockWaitSeconds: Double = FeedbackStore.lockWaitSeconds,
                                 _ body: (inout FeedbackStore) throws -> R) throws -> R {
        let lockPath = path + ".lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, SecureFile.privateMode)
        guard fd >= 0 else { throw IOError(path: lockPath, reason: "cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        // Bounded: another holder only loads and saves, so a lock held for
        // long means a stuck process, which is said rather than waited for.
        let deadline = Deadline.after(seconds: lockWaitSeconds)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else {
                throw IOError(path: lockPath, operation: "flock", errno: errno)
            }
            guard Deadline.now() < deadline else {
                throw IOError(path: path, reason: "is locked by another process (\(lockPath)) for over \(format(lockWaitSeconds)) s; is a feedback or send stuck?")
            }
            usleep(5_000)
        }
        defer { flock(fd, LOCK_UN) }
        var store = try load(path: path)
        let result = try body(&store)
        try store.save(path: path)
        return result
    }

    /// Writes atomically, 0600. Use ``update(path:_:)`` where another process may write the same store.
    public func save(path: String) throws {
        try SecureFile.write(serialized(), to: path, mode: SecureFile.privateMode)
    }
}

private func format(_ seconds: Double) -> String {
    seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
}
