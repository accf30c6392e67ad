#if canImport(Glibc)
import Glibc
#endif
import ByteStreams
import CampaignIO
internal import CIOShims

/// What a plan (or a scheduled send at release time) needs of a ledger: per
/// device, whether this campaign reached it, and how many notifications of
/// the cap's scope reached it inside the cap's window. Token hashes in an
/// open-addressing table: 9 bytes a slot, at most 3/4 full.
public struct LedgerView: Sendable {
    public static let reachedBit: UInt8 = 0x80
    private var keys: [UInt64]
    private var values: [UInt8]
    private var shift: UInt64
    public private(set) var devices = 0
    /// Entries read, and of those, the ones this view keeps.
    public internal(set) var entriesRead = 0
    public internal(set) var entriesKept = 0
    public internal(set) var segments = 0
    /// Segments whose tail was torn (ignored from there on).
    public internal(set) var tornSegments = 0
    /// Entries in blocks whose checksum failed (skipped: the damage of a
    /// disk or a hand, not a crash), and the segments that hold them.
    public internal(set) var corruptEntries = 0
    public internal(set) var corruptSegments: [String] = []
    /// Segments not read past their names: another campaign, and nothing of the cap's scope and window.
    public internal(set) var segmentsSkipped = 0

    public init(expected: Int = 0) {
        var bits: UInt64 = 4
        while (1 << bits) * 3 / 4 < max(expected, 8) { bits += 1 }
        keys = [UInt64](repeating: 0, count: 1 << Int(bits))
        values = [UInt8](repeating: 0, count: 1 << Int(bits))
        shift = 64 - bits
    }

    public var isEmpty: Bool { devices == 0 }
    public var allocatedBytes: Int { keys.count * 9 }

    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: (hash &* 0x9E37_79B9_7F4A_7C15) >> shift) }

    /// Adds one entry's worth: `reached` sets the campaign bit, `counted` adds one to the count (saturating at 127).
    public mutating func add(_ hash: UInt64, reached: Bool, counted: Bool) {
        if (devices + 1) * 4 > keys.count * 3 { grow() }
        let mask = keys.count - 1
        var i = home(hash)
        while true {
            let k = keys[i]
            if k == hash || k == 0 {
                if k == 0 { keys[i] = hash; devices += 1 }
                var v = values[i]
                if reached { v |= Self.reachedBit }
                if counted, v & 0x7F < 0x7F { v += 1 }
                values[i] = v
                return
            }
            i = (i + 1) & mask
        }
    }

    /// The device's flags: ``reachedBit`` and the count in the low 7 bits; 0 when the ledger has nothing of it.
    @inline(__always)
    public func flags(_ hash: UInt64) -> UInt8 {
        keys.withUnsafeBufferPointer { keys in
            let mask = keys.count - 1
            var i = home(hash)
            while true {
                let k = keys[i]
                if k == hash { return values[i] }
                if k == 0 { return 0 }
                i = (i + 1) & mask
            }
        }
    }

    /// Starts loading the slot `hash` leads to, for a ``flags(_:)`` a few rows later.
    @inline(__always)
    public func prefetch(_ hash: UInt64) {
        let i = home(hash)
        keys.withUnsafeBufferPointer { campaign_prefetch($0.baseAddress! + i) }
        values.withUnsafeBufferPointer { campaign_prefetch($0.baseAddress! + i) }
    }

    private mutating func grow() {
        var bigger = LedgerView(expected: keys.count * 2)
        for i in keys.indices where keys[i] != 0 { bigger.insertRaw(keys[i], values[i]) }
        (keys, values, shift) = (bigger.keys, bigger.values, bigger.shift)
    }

    private mutating func insertRaw(_ hash: UInt64, _ value: UInt8) {
        let mask = keys.count - 1
        var i = home(hash)
        while keys[i] != 0 { i = (i + 1) & mask }
        keys[i] = hash
        values[i] = value
        devices += 1
    }
}

/// Reads every segment of a ledger directory into a ``LedgerView``.
public enum LedgerReader {
    /// What to keep: entries of `campaign` (once per campaign), and entries
    /// of campaigns of `cap.scope` at or after `now - cap.perSeconds`.
    /// With `ownClaims`, the count is instead `campaign`'s own claims (a
    /// resume's: which devices its earlier runs claimed, so it claims none twice).
    public struct Filter: Sendable {
        public var campaign: String
        public var cap: FrequencyCap?
        public var now: UInt32
        public var ownClaims: Bool
        public init(campaign: String, cap: FrequencyCap?, now: UInt32, ownClaims: Bool = false) {
            (self.campaign, self.cap, self.now, self.ownClaims) = (campaign, cap, now, ownClaims)
        }
    }

    /// The segment files of `directory` (a missing directory: none).
    /// The segments of `directory`; none when it does not exist yet (a
    /// first campaign's ledger). A file, or a directory that cannot be read,
    /// is an error: a plan must never go on as if the ledger were empty.
    public static func segments(of directory: String) throws(LedgerError) -> [String] {
        guard let dir = opendir(directory) else {
            if errno == ENOENT { return [] }
            throw LedgerError(path: directory, reason: "cannot be read as a ledger directory: \(String(cString: strerror(errno)))")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let e = readdir(dir) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name.hasSuffix(LedgerFormat.segmentSuffix), !name.hasPrefix(".") { names.append("\(directory)/\(name)") }
        }
        return names.sorted()
    }

    /// Reads the segments on up to `threads` threads (sequential reads, a
    /// bounded buffer each, no allocation per entry), then builds the view.
    public static func load(directory: String, filter: Filter, threads: Int = 2) throws -> LedgerView {
        let files = try segments(of: directory)
        let me = LedgerFormat.nameID(filter.campaign)
        let cutoff = filter.cap.map { filter.now &- UInt32(clamping: $0.perSeconds) }
        let scope = filter.cap?.scope
        let n = max(1, min(threads, files.count))
        final class Part: @unchecked Sendable {
            var hashes: [UInt64] = []
            var flags: [UInt8] = []   // bit 7: this campaign; bit 0: counted
            var read = 0, torn = 0, skipped = 0, corruptEntries = 0
            var corruptSegments: [String] = []
            var failure: LedgerError?
        }
        let parts = (0..<n).map { _ in Part() }
        let work: @Sendable (Int) -> Void = { t in
            let part = parts[t]
            for f in stride(from: t, to: files.count, by: n) {
                let fd = open(files[f], O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { part.failure = LedgerError(path: files[f], reason: "cannot be read: \(String(cString: strerror(errno)))"); return }
                defer { close(fd) }
                if Self.canSkip(fd: fd, me: me, scope: scope, cutoff: cutoff) { part.skipped += 1; continue }
                var inScope = Set<UInt32>()
                // Blocks hold one campaign's entries: the scope is looked up once per run of one id.
                var lastID: UInt32 = 0, lastInScope = false, haveLast = false
                var lost = 0, damaged = false
                let valid = LedgerScanner.scan(fd: fd) { kind, payload in
                    switch kind {
                    case .names:
                        for name in LedgerFormat.parseNames(payload) ?? [] where name.scope == scope { inScope.insert(name.id) }
                        haveLast = false
                    case .entries, .claims, .proofs:
                        let count = payload.count / LedgerFormat.entryBytes
                        part.read += count
                        let base = payload.baseAddress!
                        let (reaches, counts, ownCount) = (kind.reaches, kind.counts, filter.ownClaims && kind == .claims)
                        for i in 0..<count {
                            let e = base + i * LedgerFormat.entryBytes
                            let id = e.loadUnaligned(fromByteOffset: 8, as: UInt32.self).littleEndian
                            var flag: UInt8 = id == me && reaches ? LedgerView.reachedBit : 0
                            if ownCount, id == me { flag |= 1 }
                            if counts, let cutoff, e.loadUnaligned(fromByteOffset: 12, as: UInt32.self).littleEndian >= cutoff {
                                if !haveLast || id != lastID { (lastID, lastInScope, haveLast) = (id, inScope.contains(id), true) }
                                if lastInScope { flag |= 1 }
                            }
                            if flag != 0 {
                                part.hashes.append(e.loadUnaligned(as: UInt64.self).littleEndian)
                                part.flags.append(flag)
                            }
                        }
                    }
                } corrupt: { lost += $0; damaged = true }
                var st = stat()
                if fstat(fd, &st) == 0, Int(st.st_size) != valid { part.torn += 1 }
                if damaged {
                    part.corruptEntries += lost
                    part.corruptSegments.append(files[f])
                }
            }
        }
        if n == 1 { work(0) } else {
            let threadsStarted = (1..<n).map { t in startThread { work(t) } }
            work(0)
            for t in threadsStarted { pthread_join(t, nil) }
        }
        if let failure = parts.lazy.compactMap(\.failure).first { throw failure }
        var view = LedgerView(expected: parts.reduce(0) { $0 + $1.hashes.count })
        for part in parts {
            for i in part.hashes.indices {
                view.add(part.hashes[i], reached: part.flags[i] & LedgerView.reachedBit != 0, counted: part.flags[i] & 1 != 0)
            }
            view.entriesRead += part.read
            view.entriesKept += part.hashes.count
            view.tornSegments += part.torn
            view.corruptEntries += part.corruptEntries
            view.corruptSegments += part.corruptSegments
            view.segmentsSkipped += part.skipped
            part.hashes = []
            part.flags = []
        }
        view.segments = files.count
        return view
    }

    /// How far a segment's time may lag its entries' (its file's modification
    /// time, set by another machine's clock on shared storage) before a plan trusts it.
    public static let clockSkewSeconds: UInt32 = 3600

    /// Whether the segment open at `fd` holds nothing a plan needs, by its
    /// first names block (a segment is one send: one campaign) and its
    /// modification time (no entry is newer: each is written as it is made;
    /// prune keeps the newest entry's time): not this campaign, and not of
    /// the cap's scope or older than its window (less the clock skew).
    static func canSkip(fd: Int32, me: UInt32, scope: String?, cutoff: UInt32?) -> Bool {
        var head = [UInt8](repeating: 0, count: LedgerFormat.fileHeaderBytes + LedgerFormat.blockHeaderBytes)
        guard pread(fd, &head, head.count, 0) == head.count,
              head.withUnsafeBytes({ LedgerFormat.isFileHeader($0) }),
              head[LedgerFormat.fileHeaderBytes] == LedgerFormat.BlockKind.names.rawValue else { return false }
        let length = head.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: LedgerFormat.fileHeaderBytes + 4, as: UInt32.self).littleEndian) }
        let expected = head.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: LedgerFormat.fileHeaderBytes + 8, as: UInt32.self).littleEndian }
        guard length <= 1 << 20 else { return false }
        var payload = [UInt8](repeating: 0, count: length)
        guard pread(fd, &payload, length, off_t(head.count)) == length else { return false }
        var crc = CRC32()
        crc.update(payload)
        guard crc.value == expected, let names = payload.withUnsafeBytes({ LedgerFormat.parseNames($0) }), !names.isEmpty else { return false }
        if names.contains(where: { $0.id == me }) { return false }
        guard let scope, let cutoff, names.contains(where: { $0.scope == scope }) else { return true }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        return Int64(st.st_mtim.tv_sec) + Int64(clockSkewSeconds) < Int64(cutoff)
    }
}
