#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import ByteStreams

/// `DIR/manifest.json` of `plan --parts N --out DIR`: the parts of one
/// planning run, each a complete plan of its own. Written last, once every
/// part's trailer is on disk, so a directory with a manifest holds every part.
public struct PlanManifest: Equatable, Sendable {
    public static let fileName = "manifest.json"
    public static let currentVersion = 1

    /// One part file, as its trailer says.
    public struct Entry: Equatable, Sendable {
        public var part: Int
        /// The file's name, relative to the manifest's directory.
        public var file: String
        public var records: Int
        public var crc32: String

        public init(part: Int, file: String, records: Int, crc32: String) {
            self.part = part
            self.file = file
            self.records = records
            self.crc32 = crc32
        }
    }

    public var campaign: String
    public var campaignHash: String
    public var format: String
    public var shards: Int
    public var created: UInt32
    /// Audience rows read and rejected, over the whole audience.
    public var rowsRead: Int
    public var rejected: Int
    public var parts: [Entry]

    public var records: Int { parts.reduce(0) { $0 + $1.records } }

    public init(campaign: String, campaignHash: String, format: String, shards: Int, created: UInt32,
                rowsRead: Int, rejected: Int, parts: [Entry]) {
        self.campaign = campaign
        self.campaignHash = campaignHash
        self.format = format
        self.shards = shards
        self.created = created
        self.rowsRead = rowsRead
        self.rejected = rejected
        self.parts = parts
    }

    public var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return .object([
            ("version", n(Self.currentVersion)), ("campaign", .string(campaign)), ("campaignHash", .string(campaignHash)),
            ("format", .string(format)), ("shards", n(shards)), ("created", n(Int(created))),
            ("parts", n(parts.count)), ("records", n(records)), ("rows", n(rowsRead)), ("rejected", n(rejected)),
            ("plans", .array(parts.map { e in
                .object([("part", n(e.part)), ("file", .string(e.file)), ("records", n(e.records)), ("crc32", .string(e.crc32))])
            })),
        ])
    }

    /// Reads a manifest; errors name the file.
    public static func load(path: String) throws -> PlanManifest {
        let bytes = try readWholeFile(path, limit: 64 << 20)
        func bad(_ why: String) -> IOError { IOError(path: path, reason: "is not a plan manifest: \(why)") }
        let v: JSONValue
        do { v = try JSONValue.parse(bytes) } catch { throw bad("\(error)") }
        guard v["version"]?.integerValue == Int64(currentVersion) else { throw bad("no version \(currentVersion)") }
        guard let campaign = v["campaign"]?.stringValue, let hash = v["campaignHash"]?.stringValue,
              let format = v["format"]?.stringValue, let shards = v["shards"]?.integerValue,
              let created = v["created"]?.integerValue, (0...Int64(UInt32.max)).contains(created),
              let rows = v["rows"]?.integerValue, let rejected = v["rejected"]?.integerValue,
              case .array(let plans)? = v["plans"] else { throw bad("a field is missing") }
        var entries: [Entry] = []
        for (i, p) in plans.enumerated() {
            guard let part = p["part"]?.integerValue, part == Int64(i), let file = p["file"]?.stringValue,
                  !file.contains("/"), let records = p["records"]?.integerValue, let crc = p["crc32"]?.stringValue else {
                throw bad("plans[\(i)] is not {\"part\":\(i),\"file\",\"records\",\"crc32\"}")
            }
            entries.append(Entry(part: Int(part), file: file, records: Int(records), crc32: crc))
        }
        return PlanManifest(campaign: campaign, campaignHash: hash, format: format, shards: Int(shards),
                            created: UInt32(created), rowsRead: Int(rows), rejected: Int(rejected), parts: entries)
    }

    /// Names a planning run: FNV-1a (64-bit) over its inputs, each ended by a
    /// zero byte, as 16 hex digits. An identity, not a defence: it tells
    /// parts of two runs apart, it does not resist a forger.
    public static func campaignHash(of fields: [[UInt8]]) -> String {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for field in fields {
            for b in field + [0] { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        }
        let hex = String(h, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
