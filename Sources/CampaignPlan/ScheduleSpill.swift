#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import LocalTime
import PlanStream

/// The zones an audience names, numbered as the preparing stage meets them.
/// Written by the preparing thread, read by the planning thread once every
/// row is planned.
final class ZoneTable: @unchecked Sendable {
    let database: ZoneDatabase
    /// The job's default zone is zone 0.
    private(set) var zones: [ZoneRules]
    /// Zone name → number: `+0530` and `+05:30` are one zone.
    private var numbers: [String: Int32] = [:]
    private let lock = Lock()

    init(database: ZoneDatabase, defaultZone: ZoneRules) {
        self.database = database
        zones = [defaultZone]
        numbers[defaultZone.name] = 0
    }

    /// What a row's zone text comes to: its zone's number, the default's
    /// (0) with `defaulted` for an unknown name, or nil for an invalid one.
    /// (The database remembers each text it was asked; callers keep their own cache.)
    func number(of text: String, defaulted: inout Bool) -> Int32? {
        switch database.zone(named: text) {
        case .zone(let rules):
            lock.lock()
            defer { lock.unlock() }
            if let known = numbers[rules.name] { return known }
            zones.append(rules)
            numbers[rules.name] = Int32(zones.count - 1)
            return Int32(zones.count - 1)
        case .unknown:
            defaulted = true
            return 0
        case .invalid:
            return nil
        }
    }

    /// Zone `number`'s name, as the database calls it.
    func name(of number: Int32) -> String {
        lock.lock()
        defer { lock.unlock() }
        return zones[Int(number)].name
    }

    var all: [ZoneRules] {
        lock.lock()
        defer { lock.unlock() }
        return zones
    }
}

/// The preparing thread's own memory of zone texts: bytes → the table's
/// answer, found by their hash (``TokenSet/hash(_:)``) and checked byte for byte.
struct ZoneCache {
    private struct Entry { var bytes: [UInt8]; var number: Int32?; var defaulted: Bool }
    private var entries: [UInt64: Entry] = [:]

    mutating func number(of text: UnsafeBufferPointer<UInt8>, table: ZoneTable, defaulted: inout Bool) -> Int32? {
        let h = TokenSet.hash(text)
        if let e = entries[h], e.bytes.elementsEqual(text) {
            defaulted = e.defaulted
            return e.number
        }
        var wasDefaulted = false
        let number = table.number(of: String(decoding: text, as: UTF8.self), defaulted: &wasDefaulted)
        // Bounded: an audience of endless distinct junk only costs lookups.
        if entries.count < 4096 { entries[h] = Entry(bytes: Array(text), number: number, defaulted: wasDefaulted) }
        defaulted = wasDefaulted
        return number
    }
}

/// Records of a scheduled campaign set aside by zone (and part) while the
/// audience is read, then written out in order of moment once every zone is
/// known: memory holds at most a small buffer per zone, the records wait in
/// one unlinked temporary file (0600; it holds tokens).
final class ScheduleSpill {
    /// Per bucket (a zone and part): bytes not yet written, chunks written, records.
    private var buffers: [[UInt8]] = []
    private var chunks: [[(offset: Int, count: Int)]] = []
    private var records: [Int] = []
    private var keys: [Int] = []
    /// Key → bucket + 1 (0: none yet).
    private var buckets: [Int32] = []
    /// Parts of the plan: a key is `zone * parts + part`.
    let parts: Int
    private let fd: Int32
    private var size = 0
    private let path: String
    static let chunkBytes = 32 << 10

    init(directory: String, parts: Int) throws(IOError) {
        self.parts = parts
        var template = Array("\(directory)/campaign-schedule-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard fd >= 0 else { throw IOError(path: path, reason: "cannot be created for the scheduled records: \(String(cString: strerror(errno)))") }
        // Unlinked at once: nothing is left behind, whatever ends the planner.
        unlink(path)
        fchmod(fd, 0o600)
        self.fd = fd
    }

    deinit { close(fd) }

    /// The key of zone `zone` in part `part`, and back.
    func key(zone: Int32, part: Int32) -> Int { Int(zone) * parts + Int(part) }
    func zone(of key: Int) -> Int { key / parts }
    func part(of key: Int) -> Int { key % parts }

    private func bucket(_ key: Int) -> Int {
        if key >= buckets.count { buckets += [Int32](repeating: 0, count: max(key + 1 - buckets.count, buckets.count)) }
        if buckets[key] > 0 { return Int(buckets[key]) - 1 }
        buffers.append([])
        chunks.append([])
        records.append(0)
        keys.append(key)
        buckets[key] = Int32(buffers.count)
        return buffers.count - 1
    }

    func append(key: Int, line: UnsafeBufferPointer<UInt8>) throws(IOError) {
        let b = bucket(key)
        buffers[b].append(contentsOf: line)
        records[b] += 1
        if buffers[b].count >= Self.chunkBytes {
            try write(buffers[b])
            chunks[b].append((size - buffers[b].count, buffers[b].count))
            buffers[b].removeAll(keepingCapacity: true)
        }
    }

    private func write(_ bytes: [UInt8]) throws(IOError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, bytes.count - done, off_t(size + done)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw IOError(path: path, reason: "cannot be written: \(String(cString: strerror(errno)))") }
            done += n
        }
        size += bytes.count
    }

    /// Record counts per key.
    var counts: [Int: Int] { Dictionary(uniqueKeysWithValues: zip(keys, records)) }

    /// Calls `body` with each record line of `key`, in the order appended.
    func forEachLine(key: Int, _ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard key < buckets.count, buckets[key] > 0 else { return }
        let b = Int(buckets[key]) - 1
        var chunk = [UInt8](repeating: 0, count: Self.chunkBytes * 2)
        func lines(_ bytes: UnsafeBufferPointer<UInt8>) throws {
            var start = 0
            for i in 0..<bytes.count where bytes[i] == 0x0A {
                try body(UnsafeBufferPointer(rebasing: bytes[start...i]))
                start = i + 1
            }
        }
        for (offset, count) in chunks[b] {
            if chunk.count < count { chunk = [UInt8](repeating: 0, count: count) }
            var done = 0
            while done < count {
                let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw IOError(path: path, reason: "cannot be read back: \(String(cString: strerror(errno)))") }
                done += n
            }
            try chunk.withUnsafeBufferPointer { try lines(UnsafeBufferPointer(rebasing: $0[0..<count])) }
        }
        try buffers[b].withUnsafeBufferPointer { try lines($0) }
    }
}

/// What a scheduled plan's summary adds.
public struct ScheduleSummary: Sendable, Equatable {
    /// deliverAt: the date every zone's moment falls on.
    public var date: String?
    /// Rows whose zone was unknown or empty and got the job's default.
    public var defaultedTimeZone = 0
    /// Planned records per hour of UTC (the hour's start, UNIX seconds).
    public var perHour: [Int64: Int] = [:]
    /// Records whose moment had passed at plan time (sent at once, or skipped, by the window).
    public var pastAtPlanTime = 0

    public init() {}
}
