import APNSWire
import CampaignIO
import ByteStreams

/// `campaign channels create --out FILE`: new channel ids appended one per
/// line as each 201 arrives, each written and fsynced before the next
/// request, so an interrupted run (a signal, a refusal, a crash) leaves every
/// channel it created in the file. A `.csv` file gets a `channel_id` header
/// when it is new or empty, which makes it an audience `campaign plan` reads;
/// with the channels' storage policy, a `storage` column too (`none` or
/// `most-recent`), so `plan` can refuse an expiration those storing nothing
/// would refuse.
///
/// Created 0644 (less the umask): a channel id is no secret (the app hands
/// it to every device that subscribes, and pushing to it takes the team's
/// key); an existing file keeps its mode.
public final class ChannelIDWriter {
    public let path: String
    private let fd: Int32
    /// The storage column's value, when the file has that column.
    private var storageColumn: String?

    public init(path: String, storage: Broadcast.StoragePolicy? = nil) throws(ChannelError) {
        self.path = path
        storageColumn = storage?.name
        let fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ChannelError(.output(IOError(path: path, operation: "open", errno: errno))) }
        self.fd = fd
        do throws(ChannelError) { try prepare() } catch {
            close(fd)
            throw error
        }
    }

    deinit { close(fd) }

    /// Writes the CSV header into an empty `.csv` file, refuses a CSV whose
    /// header is another, and ends a last line that lacks its newline (so the
    /// first id does not join it).
    private func prepare() throws(ChannelError) {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw ChannelError(.output(IOError(path: path, operation: "stat", errno: errno))) }
        let size = Int(info.st_size)
        let isCSV = path.lowercased().hasSuffix(".csv")
        if size == 0 {
            if !isCSV { storageColumn = nil }
            if isCSV { try append(Array((storageColumn == nil ? "channel_id\n" : "channel_id,storage\n").utf8)) }
            return
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return }
        if isCSV {
            var head = [UInt8](repeating: 0, count: 64)
            let n = pread(fd, &head, head.count, 0)
            let first = head.prefix(max(0, n)).prefix { $0 != 0x0A && $0 != 0x0D }
            if first.elementsEqual("channel_id,storage".utf8) {
                if storageColumn == nil { throw ChannelError(.badInput("\(path) has a storage column: give create --storage for its new channels' policy.")) }
            } else if first.elementsEqual("channel_id".utf8) {
                storageColumn = nil
            } else {
                throw ChannelError(.badInput("\(path) is a CSV file whose header is neither channel_id nor channel_id,storage: name a new file, or one that create wrote."))
            }
        } else {
            storageColumn = nil
        }
        var last: UInt8 = 0
        if pread(fd, &last, 1, off_t(size - 1)) == 1, last != 0x0A { try append([0x0A]) }
    }

    /// Appends `id` and a newline, and fsyncs: once this returns, the id survives a crash.
    public func append(_ id: ChannelID) throws(ChannelError) {
        try append(Array((id.base64 + (storageColumn.map { "," + $0 } ?? "") + "\n").utf8))
        guard fsync(fd) == 0 || errno == EINVAL else { throw ChannelError(.output(IOError(path: path, operation: "fsync", errno: errno))) }
    }

    private func append(_ bytes: [UInt8]) throws(ChannelError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw ChannelError(.output(IOError(path: path, operation: "write", errno: errno))) }
            offset += n
        }
    }
}

/// `campaign channels delete --from FILE`: channel ids one per line, or a
/// CSV whose header has a `channel_id` column (what `create --out x.csv`
/// writes, or an audience with more columns). Blank lines and lines
/// starting with `#` are skipped; an id that is not canonical base64 stops
/// the whole read, naming its line, before anything is deleted.
public enum ChannelIDList {
    public static func read(path: String) throws(ChannelError) -> [ChannelID] {
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path, limit: 64 << 20) } catch { throw ChannelError(.unreadableInput(error)) }
        var column: Int?
        var ids: [ChannelID] = []
        var seen: Set<ChannelID> = []
        var first = true
        // By bytes: Swift reads CR LF as one character, so a file saved on Windows would not split on LF.
        for (index, raw) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
            let line = String(decoding: raw.last == 0x0D ? raw.dropLast() : raw, as: UTF8.self)[...]
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) || line.hasPrefix("#") { continue }
            let fields = csvFields(line)
            if first {
                first = false
                if let c = fields.firstIndex(of: "channel_id") { column = c; continue }
                if path.lowercased().hasSuffix(".csv") && fields.count > 1 {
                    throw ChannelError(.missingColumn("\(path), line \(index + 1): a CSV file needs a channel_id column in its header."))
                }
            }
            let field = column.map { $0 < fields.count ? fields[$0] : "" } ?? String(line)
            guard let id = ChannelID(base64: field) else {
                let shown = field.count > 40 ? field.prefix(40) + "…" : field[...]
                throw ChannelError(.badInput("\(path), line \(index + 1): \"\(shown)\" is not a channel id (\(ChannelID.problem(with: field).flatMap { if case .tooLong = $0 { $0.description } else { nil } } ?? "base64, as APNs issues them"))."))
            }
            if seen.insert(id).inserted { ids.append(id) }
        }
        return ids
    }

    /// The fields of one CSV line (RFC 4180 quotes; ids never hold a comma or quote, other columns may).
    package static func csvFields(_ line: Substring) -> [String] {
        var fields: [String] = []
        var current = ""
        var quoted = false
        var iterator = line.makeIterator()
        var pending: Character? = nil
        while let c = pending ?? iterator.next() {
            pending = nil
            if quoted {
                if c == "\"" {
                    if let next = iterator.next() {
                        if next == "\"" { current.append("\"") } else { quoted = false; pending = next }
                    } else { quoted = false }
                } else { current.append(c) }
            } else if c == "\"" && current.isEmpty {
                quoted = true
            } else if c == "," {
                fields.append(String(current.trimmingWhitespace()))
                current = ""
            } else {
                current.append(c)
            }
        }
        fields.append(String(current.trimmingWhitespace()))
        return fields
    }
}

#if canImport(Glibc)
import Glibc
#endif
