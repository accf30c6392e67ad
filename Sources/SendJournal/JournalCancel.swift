#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import LocalTime
import ByteStreams

/// A campaign cancelled for good (`campaign cancel`): who, when and why,
/// kept in the journal directory's `cancel` file as one record in the log's
/// own framing (`CRC32 {"t":"cancel","by":…,"at":…,"reason":…}`).
///
/// It is a file of its own, not a line of `journal.log`, so that `cancel`
/// can write it while a send holds the journal's lock and appends to the
/// log: the send never opens it, so it can neither tear nor lose it. It is
/// written aside, fsynced and renamed into place, and the directory fsynced:
/// once `cancel` says so, it survives a power loss. A journal directory that
/// does not exist yet (a part not started) gets one too, so its first
/// `send --journal` refuses to start.
public struct JournalCancel: Equatable, Sendable {
    public static let fileName = "cancel"

    /// `user@host (pid N)` of the `cancel` command, or its `--by NAME`.
    public var by: String
    /// When, in UNIX seconds.
    public var at: Int
    public var reason: String?

    public init(by: String, at: Int, reason: String?) {
        (self.by, self.at, self.reason) = (by, at, reason)
    }

    /// `user@host (pid N)` for this process.
    public static func defaultBy() -> String {
        let user = getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(geteuid())"
        var host = [CChar](repeating: 0, count: 256)
        let name = gethostname(&host, host.count) == 0 ? String(cString: host) : "?"
        return "\(user)@\(name) (pid \(getpid()))"
    }

    package var json: JSONValue {
        .object([("t", .string("cancel")), ("by", .string(by)), ("at", .number(String(at)))]
                + (reason.map { [("reason", JSONValue.string($0))] } ?? []))
    }

    package init?(json v: JSONValue) {
        guard v["t"]?.stringValue == "cancel", let by = v["by"]?.stringValue, let at = v["at"]?.integerValue else { return nil }
        self.init(by: by, at: Int(at), reason: v["reason"]?.stringValue)
    }

    /// "cancelled by alice@db1 (pid 42) at 2026-11-26T19:40:00Z (reason: wrong message)".
    public var sentence: String {
        "cancelled by \(by) at \(utcText(Int64(at)))" + (reason.map { " (reason: \($0))" } ?? "")
    }

    package static func path(_ directory: String) -> String { "\(directory)/\(fileName)" }

    /// Whether the journal in `directory` was cancelled (one `access`: cheap enough for every signal and run).
    public static func exists(directory: String) -> Bool { access(path(directory), F_OK) == 0 }

    /// The journal's cancel record; nil when it was not cancelled (or the
    /// file is torn: written aside and renamed, it never is).
    public static func read(directory: String) -> JournalCancel? {
        guard let bytes = try? readWholeFile(path(directory), limit: 1 << 16) else { return nil }
        let line = bytes.last == 0x0A ? bytes.dropLast() : bytes[...]
        return Journal.verify(line).flatMap(JournalCancel.init(json:))
    }

    /// Writes the record durably (aside, fsynced, renamed, the directory
    /// fsynced), making `directory` (0700) when it does not exist.
    public func write(directory: String) throws {
        try SecureFile.makeDirectory(directory, mode: 0o700)
        let file = Self.path(directory)
        try SecureFile.write(Journal.line(json), to: file)
        try SecureFile.syncDirectory(of: file)
    }
}

/// A send refused because its journal was cancelled: `send` says so in one
/// sentence, sends nothing and exits 0 (cron's next `--due-only` run included).
public struct CancelledJournal: Error, CustomStringConvertible {
    public var directory: String
    public var cancel: JournalCancel

    public var description: String {
        "the send in \(directory) was \(cancel.sentence); nothing is sent"
    }

    /// Throws when the journal in `directory` was cancelled.
    public static func refuse(directory: String) throws {
        if let cancel = JournalCancel.read(directory: directory) {
            throw CancelledJournal(directory: directory, cancel: cancel)
        }
        // A cancel file that does not read (another version's, or damaged) still cancels.
        if JournalCancel.exists(directory: directory) {
            throw CancelledJournal(directory: directory, cancel: JournalCancel(by: "?", at: 0, reason: "unreadable cancel file"))
        }
    }
}
