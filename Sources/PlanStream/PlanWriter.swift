#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import LocalTime
import ByteStreams

/// Writes a plan stream, buffered, to a file (created 0600: it holds tokens) or standard output.
public final class PlanWriter {
    private let file: BufferedFileWriter
    /// Where the plan ends up (for messages).
    public let path: String
    /// A plan file is written under this name and renamed to ``path`` once
    /// its trailer is on disk, so a failed or killed `plan` never leaves a
    /// partial plan where a send would find it. Nil for standard output and
    /// for paths that are not regular files (a pipe, /dev/null).
    private let temporaryPath: String?
    private var completed = false
    private var crc = CRC32()
    public private(set) var records = 0
    /// The trailer written, once the plan is complete.
    public private(set) var trailer: PlanTrailer?
    private var seq: UInt64 = 0
    /// `{"seq":` and the seq's digits, counted up in place: formatting a
    /// number per record was 4% of plan's CPU.
    private let seqText = SeqText()
    /// Record lines not yet written; only record lines, so each flush
    /// checksums one long run (far faster than line by line).
    private let pending = ByteArena(capacity: 1 << 17)
    private static let flushThreshold = 1 << 16

    /// - Parameter inPlace: write straight to `path`, as to a stream, so a
    ///   plan that fails keeps the records made before the failure (without
    ///   a trailer). The default writes a file under a temporary name.
    public init(path: String, inPlace: Bool = false) throws(IOError) {
        self.path = path == "-" ? "standard output" : path
        var info = stat()
        let regularOrAbsent = path != "-" && (stat(path, &info) != 0 ? errno == ENOENT : (info.st_mode & S_IFMT) == S_IFREG)
        temporaryPath = regularOrAbsent && !inPlace ? path + ".partial" : nil
        file = try BufferedFileWriter(path: temporaryPath ?? path, writeBehind: true)
    }

    deinit {
        if let temporaryPath {
            // Never completed: the partial file goes (what it held is not a plan).
            if !completed { unlink(temporaryPath) }
        } else {
            // On a stream, a plan ended early keeps the records made (it has
            // no trailer, so readers know it is incomplete).
            try? flush()
        }
    }

    public func writeHeader(_ header: PlanHeader) throws(IOError) {
        header.json.serialize(into: &file.buffer)
        file.buffer.append(0x0A)
        try file.flush()
    }

    /// Appends the next record from its line without the leading `{"seq":N`
    /// (from `,"shard":` to the newline, as the planner's preparing stage makes it).
    /// - Parameter fieldsAfterSeq: a scheduled record's `,"at":N` (and
    ///   `,"tz":"…"`), the same bytes for every record of a zone.
    package func append(lineAfterSeq: UnsafeBufferPointer<UInt8>, fieldsAfterSeq: UnsafeBufferPointer<UInt8>? = nil) throws(IOError) {
        seq += 1
        seqText.increment()
        seqText.appendLineStart(to: pending)
        if let fieldsAfterSeq { pending.append(fieldsAfterSeq) }
        pending.append(lineAfterSeq)
        records += 1
        if pending.count >= Self.flushThreshold { try flush() }
    }

    /// A scheduled record's fields after its seq: `,"at":N` and, for quiet hours, `,"tz":"…"`.
    package static func scheduleFields(at: Int64, timeZone: String?) -> [UInt8] {
        var out = Array(#","at":"#.utf8)
        JSONText.appendDecimal(at, to: &out)
        if let timeZone {
            out += Array(#","tz":"#.utf8)
            JSONText.appendString(Array(timeZone.utf8), to: &out)
        }
        return out
    }

    public func writeTrailer(rowsRead: Int, rejected: Int, variants: [Int]? = nil) throws(IOError) {
        try finish(rowsRead: rowsRead, rejected: rejected, variants: variants)
        try commit()
    }

    /// Writes the trailer and hands the whole plan to the disk without
    /// waiting; ``commit(syncingDirectory:)`` then waits and puts it in place.
    /// Parts are all finished before the first is committed, so their disk
    /// writes overlap (one after another, 8 parts took 10–30% longer than one file).
    public func finish(rowsRead: Int, rejected: Int, variants: [Int]? = nil) throws(IOError) {
        try flush()
        let trailer = PlanTrailer(records: records, crc32: crc.hex, rowsRead: rowsRead, rejected: rejected, variants: variants)
        trailer.json.serialize(into: &file.buffer)
        file.buffer.append(0x0A)
        try file.flush()
        file.startWriteBack()
        self.trailer = trailer
    }

    /// Waits for the plan to be on disk and renames it into place.
    /// - Parameter syncingDirectory: false when the caller syncs the
    ///   directory once for several plans in it.
    public func commit(syncingDirectory: Bool = true) throws(IOError) {
        try file.sync()
        if let temporaryPath {
            guard rename(temporaryPath, path) == 0 else {
                throw IOError(path: path, reason: "cannot be put in place (rename from \(temporaryPath)): \(String(cString: strerror(errno)))")
            }
            // The rename itself must reach the disk before `plan` says the plan is there.
            if syncingDirectory { try SecureFile.syncDirectory(of: path) }
        }
        completed = true
    }

    public func flush() throws(IOError) {
        let lines = UnsafeRawBufferPointer(pending.all)
        crc.update(lines)
        try file.write(lines)
        pending.removeAll()
    }
}

/// The text `{"seq":N` for a counter N, incremented digit by digit. Its
/// bytes live in memory of its own: as an Array in the writer, they were
/// retained and released for every record.
final class SeqText {
    private static let prefix: StaticString = #"{"seq":"#
    private let bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: 32)
    private var count: Int
    private let prefixCount = SeqText.prefix.utf8CodeUnitCount

    init() {
        bytes.initialize(from: Self.prefix.utf8Start, count: prefixCount)
        bytes[prefixCount] = UInt8(ascii: "0")
        count = prefixCount + 1
    }

    deinit { bytes.deallocate() }

    /// N + 1: the last digit goes up, carrying over nines.
    func increment() {
        var i = count - 1
        while i >= prefixCount {
            if bytes[i] != UInt8(ascii: "9") {
                bytes[i] += 1
                return
            }
            bytes[i] = UInt8(ascii: "0")
            i -= 1
        }
        // All nines: one more digit, a 1 in front (a UInt64 has at most 20).
        (bytes + prefixCount + 1).update(from: bytes + prefixCount, count: count - prefixCount)
        bytes[prefixCount] = UInt8(ascii: "1")
        count += 1
    }

    @inline(__always)
    func appendLineStart(to out: ByteArena) {
        out.append(UnsafeBufferPointer(start: bytes, count: count))
    }
}
