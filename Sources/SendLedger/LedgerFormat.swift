#if canImport(Glibc)
import Glibc
#endif
import ByteStreams
import CampaignIO

/// The send ledger's on-disk format: a directory of segment files, one per
/// send (`<host>-<journal id>.seg`), each appended by one process only, so no
/// lock spans machines.
///
/// A segment: a 16-byte file header, then blocks.
///
///     file header  "CLEDGER\0" (8) | version u16 = 1 | 0 u16 | CRC-32 of the first 12 bytes u32
///     block        kind u8 | 0 0 0 | payload bytes u32 | CRC-32 of the payload u32 | 0 u32 | payload
///       kind 1, entries: n × 16 bytes, each token hash u64 | campaign id u32 | UNIX seconds u32
///       kind 2, names:   repeated campaign id u32 | name length u16 | name | scope length u16 | scope
///       kind 3, claims:  as entries: notifications a send with a frequencyCap is about to write
///       kind 4, proofs:  as entries: the accepted ones among a send's claims
///
/// Little-endian. An entry is 16 bytes: a device is the FNV-1a-64 hash of its
/// token's bytes, a campaign the low 32 bits of the FNV-1a-64 hash of its name;
/// the names block maps the ids to names and scopes (a segment holds one
/// campaign, so one names block, written again by each resume). A block that
/// runs past the end of the file or whose CRC does not match (a torn tail
/// after a crash) ends the segment: readers ignore it, the writer cuts it off.
///
/// What an entry counts for: a cap counts what may have reached a device, so
/// a send with a `frequencyCap` claims each notification (kind 3) under the
/// scope's claim lock before its bytes leave, and records its acceptance as
/// a proof (kind 4) that counts for "once per campaign" only; a send without
/// a cap writes kind 1, which counts for both. Each notification is counted
/// once per campaign whatever became of it: a claim lost with a connection
/// or a killed process still counts.
public enum LedgerFormat {
    public static let magic: [UInt8] = Array("CLEDGER".utf8) + [0]
    public static let version: UInt16 = 1
    public static let fileHeaderBytes = 16
    public static let blockHeaderBytes = 16
    public static let entryBytes = 16
    /// The most entries one block holds (1 MiB of payload), so readers need a bounded buffer.
    public static let maxEntriesPerBlock = 65_536
    public static let maxBlockPayload = maxEntriesPerBlock * entryBytes
    public static let segmentSuffix = ".seg"

    public enum BlockKind: UInt8 {
        case entries = 1, names = 2, claims = 3, proofs = 4
        /// Blocks of 16-byte entries (every kind but names).
        public var holdsEntries: Bool { self != .names }
        /// Whether an entry of this kind names a device the campaign reached (once per campaign).
        public var reaches: Bool { self == .entries || self == .proofs }
        /// Whether an entry of this kind counts toward a frequencyCap.
        public var counts: Bool { self == .entries || self == .claims }
    }

    /// The claim lock of a cap's scope in a ledger directory: held for the
    /// short time a send checks devices against the ledger and appends its
    /// claims, so two sends of one scope cannot both pass the same device.
    public static func claimLockName(scope: String) -> String {
        let h = String(nameID(scope), radix: 16)
        return ".claims-\(String(repeating: "0", count: 8 - h.count))\(h).lock"
    }

    /// FNV-1a-64, the project's token hash (as ``Planner/shard(of:shards:)``); 0 is never returned (it marks empty slots).
    @inline(__always)
    public static func tokenHash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return h == 0 ? 1 : h
    }

    public static func tokenHash(_ bytes: [UInt8]) -> UInt64 { bytes.withUnsafeBufferPointer { tokenHash($0) } }

    /// A campaign's (or scope's) id: the low 32 bits of FNV-1a-64 of its name.
    public static func nameID(_ name: String) -> UInt32 {
        UInt32(truncatingIfNeeded: tokenHash(Array(name.utf8)))
    }

    public static func fileHeader() -> [UInt8] {
        var out = magic
        append16(version, to: &out)
        append16(0, to: &out)
        var crc = CRC32()
        crc.update(out)
        append32(crc.value, to: &out)
        return out
    }

    /// Whether `bytes` (16) is a segment header this version reads.
    public static func isFileHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= fileHeaderBytes, Array(bytes[0..<8]) == magic,
              bytes.loadUnaligned(fromByteOffset: 8, as: UInt16.self).littleEndian == version else { return false }
        var crc = CRC32()
        crc.update(UnsafeRawBufferPointer(rebasing: bytes[0..<12]))
        return crc.value == bytes.loadUnaligned(fromByteOffset: 12, as: UInt32.self).littleEndian
    }

    public static func block(kind: BlockKind, payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [kind.rawValue, 0, 0, 0]
        append32(UInt32(payload.count), to: &out)
        var crc = CRC32()
        crc.update(payload)
        append32(crc.value, to: &out)
        append32(0, to: &out)
        return out + payload
    }

    public static func appendEntry(hash: UInt64, campaign: UInt32, seconds: UInt32, to out: inout [UInt8]) {
        append64(hash, to: &out)
        append32(campaign, to: &out)
        append32(seconds, to: &out)
    }

    public static func namesPayload(_ names: [(id: UInt32, name: String, scope: String)]) -> [UInt8] {
        var out: [UInt8] = []
        for n in names {
            append32(n.id, to: &out)
            let name = Array(n.name.utf8.prefix(65_535)), scope = Array(n.scope.utf8.prefix(65_535))
            append16(UInt16(name.count), to: &out); out += name
            append16(UInt16(scope.count), to: &out); out += scope
        }
        return out
    }

    public static func parseNames(_ p: UnsafeRawBufferPointer) -> [(id: UInt32, name: String, scope: String)]? {
        var out: [(UInt32, String, String)] = []
        var i = 0
        func text() -> String? {
            guard i + 2 <= p.count else { return nil }
            let n = Int(p.loadUnaligned(fromByteOffset: i, as: UInt16.self).littleEndian)
            i += 2
            guard i + n <= p.count else { return nil }
            defer { i += n }
            return String(decoding: UnsafeRawBufferPointer(rebasing: p[i..<(i + n)]), as: UTF8.self)
        }
        while i < p.count {
            guard i + 4 <= p.count else { return nil }
            let id = p.loadUnaligned(fromByteOffset: i, as: UInt32.self).littleEndian
            i += 4
            guard let name = text(), let scope = text() else { return nil }
            out.append((id, name, scope))
        }
        return out
    }

    static func append16(_ v: UInt16, to out: inout [UInt8]) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
    static func append32(_ v: UInt32, to out: inout [UInt8]) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
    static func append64(_ v: UInt64, to out: inout [UInt8]) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }

    /// This machine's name, for segment names (letters, digits, '.', '-', '_' only).
    public static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let name = gethostname(&buffer, buffer.count) == 0 ? String(cString: buffer) : "host"
        let clean = String(name.unicodeScalars.map { s -> Character in
            (("a"..."z").contains(s) || ("A"..."Z").contains(s) || ("0"..."9").contains(s) || s == "." || s == "-" || s == "_") ? Character(s) : "_"
        })
        return clean.isEmpty ? "host" : clean
    }

    /// The segment of a send journaled in `journalDirectory` on this machine:
    /// `<host>-<16 hex digits of FNV-1a-64 of the journal's absolute path>.seg`.
    /// A resume on the same machine appends to the same segment.
    public static func segmentName(journalDirectory: String, host: String = hostName()) -> String {
        var resolved = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let path = realpath(journalDirectory, &resolved) != nil ? String(cString: resolved) : journalDirectory
        let h = String(tokenHash(Array(path.utf8)), radix: 16)
        return "\(host)-\(String(repeating: "0", count: 16 - h.count))\(h)\(segmentSuffix)"
    }
}

/// A campaign rule of a job: no device gets more than `max` notifications of
/// campaigns of `scope` within `perSeconds` (the job's `frequencyCap`).
public struct FrequencyCap: Sendable, Equatable {
    public var max: Int
    public var perSeconds: Int
    public var scope: String
    public init(max: Int, perSeconds: Int, scope: String) { (self.max, self.perSeconds, self.scope) = (max, perSeconds, scope) }
}

/// A ledger that cannot be used.
public struct LedgerError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var reason: String
    /// A send's segment could not be made or written (73, or 74 for a full or failing disk), rather than a ledger that cannot be read (66).
    public var writing: Bool
    public var errno: Int32?
    public init(path: String, reason: String, writing: Bool = false, errno: Int32? = nil) {
        (self.path, self.reason, self.writing, self.errno) = (path, reason, writing, errno)
    }
    public var description: String { "\(path): \(reason)" }
}
