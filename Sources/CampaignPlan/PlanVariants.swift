import Glibc
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import PlanStream
import CampaignRules
import ByteStreams

/// A job's variants as the planner uses them: which variant a token is in,
/// each variant's message selector, and its name quoted for the record.
struct PlanVariants {
    let assigner: VariantAssigner
    let holdout: [Bool]
    let selectors: [MessageSelector]
    /// Where each variant's messages start in the job's messages.
    let firstMessage: [Int]
    /// Each name quoted, one after another.
    let quotedNames: [UInt8]
    let nameRanges: [Range<Int>]
    let names: [String]

    init?(job: CampaignJob) {
        guard let assigner = job.variantAssigner else { return nil }
        self.assigner = assigner
        holdout = job.variants.map(\.holdout)
        selectors = job.variants.indices.map { job.selector(ofVariant: $0) }
        firstMessage = job.variants.map(\.messages.lowerBound)
        names = job.variants.map(\.name)
        var quoted: [UInt8] = [], ranges: [Range<Int>] = []
        for name in names {
            let start = quoted.count
            JSONText.appendString(Array(name.utf8), to: &quoted)
            ranges.append(start..<quoted.count)
        }
        quotedNames = quoted
        nameRanges = ranges
    }

    /// The header's list of them.
    static func header(_ job: CampaignJob) -> [PlanVariant] {
        job.variants.map { PlanVariant(name: $0.name, weight: $0.weight, holdout: $0.holdout) }
    }
}

/// One variant's counts in a planning run: records planned, or (a holdout) devices held out.
public struct VariantPlanCount: Equatable, Sendable {
    public var name: String
    public var holdout: Bool
    /// Records planned; for a holdout, devices written to the holdout file.
    public var count: Int

    public init(name: String, holdout: Bool, count: Int) { (self.name, self.holdout, self.count) = (name, holdout, count) }
}

extension PlanSummary {
    /// Devices of holdout variants: neither planned nor rejected.
    public var heldOut: Int { perVariant.filter(\.holdout).reduce(0) { $0 + $1.count } }

    /// `"held_out":N,"per_variant":{"A":{"planned":N},"control":{"held_out":N}}`, with variants only.
    var variantsJSON: [(key: String, value: JSONValue)] {
        guard !perVariant.isEmpty else { return [] }
        return [
            ("held_out", .number(String(heldOut))),
            ("per_variant", .object(perVariant.map { v in
                (v.name, .object([(v.holdout ? "held_out" : "planned", .number(String(v.count)))]))
            })),
        ]
    }

    /// `  variants: A 45012 planned, B 44990 planned, control 9998 held out`.
    var variantsText: [String] {
        guard !perVariant.isEmpty else { return [] }
        return ["  variants: " + perVariant.map { "\($0.name) \($0.count) \($0.holdout ? "held out" : "planned")" }.joined(separator: ", ")]
    }
}

/// Writes the holdout file: NDJSON `{"line":N,"token":"hex","variant":"control"[,"tz":"Europe/Berlin"],"row":{…}}`,
/// one line per device held out (the row's columns as strings; `tz`, a
/// scheduled plan's: the zone its moment would have been in), created 0600
/// (it holds tokens).
///
/// It is the only record of who was held out, so it is written beside its
/// place and put there only once the plan is complete (``commit()``): a
/// planner that dies (a closed pipe, a signal, a full disk) leaves the one
/// an earlier plan wrote as it was.
public final class HoldoutWriter {
    private let file: BufferedFileWriter
    /// Where the file goes once complete.
    public let path: String

    public init(path: String) throws(IOError) {
        self.path = path
        file = try BufferedFileWriter(path: Self.pendingPath(path))
    }

    /// The file being written, beside its place.
    static func pendingPath(_ path: String) -> String { "\(path).part" }

    /// `row` is the row's JSON object, made by the preparing stage.
    func append(line: Int, token: UnsafeBufferPointer<UInt8>, variant: UnsafeBufferPointer<UInt8>, timeZone: String?,
                row: UnsafeBufferPointer<UInt8>) throws(IOError) {
        file.buffer.append(contentsOf: #"{"line":"#.utf8)
        JSONText.appendDecimal(line, to: &file.buffer)
        file.buffer.append(contentsOf: #","token":""#.utf8)
        HexEncoding.append(token, to: &file.buffer)
        file.buffer.append(contentsOf: #"","variant":"#.utf8)
        file.buffer.append(contentsOf: variant)
        if let timeZone {
            file.buffer.append(contentsOf: #","tz":"#.utf8)
            JSONText.appendString(Array(timeZone.utf8), to: &file.buffer)
        }
        file.buffer.append(contentsOf: #","row":"#.utf8)
        file.buffer.append(contentsOf: row)
        file.buffer.append(contentsOf: "}\n".utf8)
        try file.flushIfFull()
    }

    public func flush() throws(IOError) { try file.flush() }

    /// Puts the complete file in its place (on disk first, then renamed over
    /// the earlier one): called once the plan it belongs to is complete.
    public func commit() throws(IOError) {
        try file.sync()
        let pending = Self.pendingPath(path)
        guard rename(pending, path) == 0 else { throw IOError(path: path, operation: "rename", errno: errno) }
        try SecureFile.syncDirectory(of: path)
    }

    /// Removes the unfinished file: the plan failed, and the earlier holdout stays.
    public func abandon() { unlink(Self.pendingPath(path)) }
}

extension PlanVariants {
    /// A holdout's row: its columns as a JSON object of strings (those the row has), in the arena as its line.
    func heldOut(row: AudienceRow, _ p: PreparedRow, schema: AudienceSchema, in batch: PreparedBatch) -> PreparedRow {
        var p = p
        p.kind = .heldOut
        var json: [UInt8] = [UInt8(ascii: "{")]
        row.storage.withUnsafeBufferPointer { storage in
            for (column, name) in schema.names.enumerated() {
                guard let r = row.range(of: column) else { continue }
                if json.count > 1 { json.append(UInt8(ascii: ",")) }
                JSONText.appendString(Array(name.utf8), to: &json)
                json.append(UInt8(ascii: ":"))
                JSONText.appendString(UnsafeBufferPointer(rebasing: storage[r]), to: &json)
            }
        }
        json.append(UInt8(ascii: "}"))
        p.lineStart = Int32(batch.arena.count)
        json.withUnsafeBufferPointer { batch.arena.append($0) }
        p.lineEnd = Int32(batch.arena.count)
        return p
    }
}
