import APNSWire
import CampaignIO
import CampaignJSON


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
        let lines = LineReaderLite(source: source)
        var number = 0
        while let line = try lines.next() {
            number += 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D }) { continue }
            guard let value = try? JSONValue.parse(line),
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

    /// Writes atomically, 0600.
    public func save(path: String) throws {
        try SecureFile.write(serialized(), to: path, mode: SecureFile.privateMode)
    }
}

/// Minimal line splitting for small files.
final class LineReaderLite {
    private let source: ByteSource
    private var buffer: [UInt8] = []
    private var chunk = [UInt8](repeating: 0, count: 65_536)
    private var atEnd = false

    init(source: ByteSource) { self.source = source }

    func next() throws -> ArraySlice<UInt8>? {
        while true {
            if let lf = buffer.firstIndex(of: 0x0A) {
                let line = buffer[...lf]
                buffer.removeSubrange(...lf)
                return ArraySlice(Array(line))
            }
            if atEnd {
                if buffer.isEmpty { return nil }
                defer { buffer.removeAll() }
                return ArraySlice(buffer)
            }
            let n = try source.read(into: &chunk)
            if n == 0 { atEnd = true } else { buffer += chunk[0..<n] }
        }
    }
}
