#if canImport(Glibc)
import Glibc
#endif
import ByteStreams
import CampaignIO

/// What an audience's time-zone field names.
public enum ZoneLookup: Sendable, Equatable {
    /// A zone the tz database has, or a fixed offset.
    case zone(ZoneRules)
    /// Shaped like a zone name, but the tz database has no such zone
    /// (`Mars/Olympus`, a misspelling): the job's default zone is used.
    case unknown
    /// Neither a zone name nor an offset (`+25:00`, `9am`, `New York`): the row is rejected.
    case invalid
}

/// The system's tz database (`/usr/share/zoneinfo`, Debian's `tzdata`, or
/// `$TZDIR`), read one zone at a time and kept; and fixed offsets.
public final class ZoneDatabase: @unchecked Sendable {
    public let directory: String
    private var cache: [String: ZoneLookup] = [:]
    private let lock = Lock()

    public init(directory: String? = nil) {
        if let directory {
            self.directory = directory
        } else if let env = getenv("TZDIR"), env.pointee != 0 {
            self.directory = String(cString: env)
        } else {
            self.directory = "/usr/share/zoneinfo"
        }
    }

    /// Whether the database is there at all (`tzdata` installed): checked
    /// once by whoever needs names, so a missing package is one sentence
    /// rather than every zone "unknown".
    public var isInstalled: Bool { access("\(directory)/UTC", R_OK) == 0 || access("\(directory)/Etc/UTC", R_OK) == 0 }

    /// The zone `text` names: an IANA name (`America/Mexico_City`; in
    /// another case, `america/mexico_city`, the zone of that name), or a
    /// fixed offset (`+05:30`, `-00:01`, `UTC-3`, `GMT+5:45`, `Z`) where,
    /// as in ISO 8601, `UTC-3` is three hours behind UTC (not POSIX's
    /// inverted sign).
    public func zone(named text: String) -> ZoneLookup {
        lock.lock()
        if let known = cache[text] { lock.unlock(); return known }
        lock.unlock()
        let found = look(up: text)
        lock.lock()
        if cache.count < 100_000 { cache[text] = found }
        lock.unlock()
        return found
    }

    private func look(up text: String) -> ZoneLookup {
        if let offset = Self.fixedOffset(text) {
            guard let seconds = offset else { return .invalid }
            return .zone(ZoneRules(name: Self.offsetName(seconds), fixedOffset: seconds))
        }
        guard Self.isNameShaped(text) else { return .invalid }
        if let rules = read(text) { return .zone(rules) }
        // IANA names are case-sensitive on disk; `america/new_york` or `utc`
        // is the zone of the one name that matches without case.
        guard let canonical = canonicalNames()[text.lowercased()], canonical != text, let rules = read(canonical) else { return .unknown }
        return .zone(rules)
    }

    private func read(_ name: String) -> ZoneRules? {
        guard let bytes = try? readWholeFile("\(directory)/\(name)", limit: 1 << 20) else { return nil }
        return try? ZoneRules(name: name, tzif: bytes)
    }

    /// Every file name under the database, by its lowercased form; a form
    /// two names share maps to neither. Listed once, on the first name
    /// not found as written.
    private var canonical: [String: String]?

    private func canonicalNames() -> [String: String] {
        lock.lock()
        defer { lock.unlock() }
        if let canonical { return canonical }
        var names: [String: String] = [:], shared: Set<String> = []
        Self.listFiles(in: directory, prefix: "", depth: 0) { name in
            let key = name.lowercased()
            if names.updateValue(name, forKey: key) != nil { shared.insert(key) }
        }
        for key in shared { names[key] = nil }
        canonical = names
        return names
    }

    /// The regular files under `path` (links followed), as names relative
    /// to the database; `posix/` and `right/` (copies of every zone under
    /// other rules) and dot-files are left out.
    private static func listFiles(in path: String, prefix: String, depth: Int, _ found: (String) -> Void) {
        guard depth < 4, let dir = opendir(path) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard !name.hasPrefix("."), !(depth == 0 && (name == "posix" || name == "right")) else { continue }
            var info = stat()
            guard stat("\(path)/\(name)", &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFREG: found(prefix + name)
            case S_IFDIR: listFiles(in: "\(path)/\(name)", prefix: prefix + name + "/", depth: depth + 1, found)
            default: break
            }
        }
    }

    /// `+05:30`, `-00:01`: how plans write a fixed offset.
    public static func offsetName(_ seconds: Int) -> String {
        let m = abs(seconds) / 60
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return (seconds < 0 ? "-" : "+") + two(m / 60) + ":" + two(m % 60)
    }

    /// nil: not written as an offset; .some(nil): written as one, but not a
    /// valid one; the offset in seconds east otherwise.
    static func fixedOffset(_ text: String) -> Int?? {
        var s = Substring(text)
        if s == "Z" || s == "z" { return .some(0) }
        for prefix in ["UTC", "GMT", "utc", "gmt"] where s.hasPrefix(prefix) {
            let rest = s.dropFirst(3)
            if rest.first == "+" || rest.first == "-" { s = rest }
            break
        }
        guard let sign = s.first, sign == "+" || sign == "-" || sign == "\u{2212}" else { return nil }
        s = s.dropFirst()
        let digits = s.filter { $0 != ":" }
        guard digits.allSatisfy({ $0.isASCII && $0.isNumber }), !digits.isEmpty else { return .some(nil) }
        let hours: Int, minutes: Int
        if s.contains(":") {
            let parts = s.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, (1...2).contains(parts[0].count), parts[1].count == 2 else { return .some(nil) }
            (hours, minutes) = (Int(parts[0])!, Int(parts[1])!)
        } else if digits.count <= 2 {
            (hours, minutes) = (Int(digits)!, 0)
        } else if digits.count == 4 {
            (hours, minutes) = (Int(digits.prefix(2))!, Int(digits.suffix(2))!)
        } else {
            return .some(nil)
        }
        // Real offsets run from UTC−12 to UTC+14.
        guard minutes < 60, hours * 60 + minutes <= 14 * 60 else { return .some(nil) }
        return .some((sign == "+" ? 1 : -1) * (hours * 3600 + minutes * 60))
    }

    /// Letters, digits, `/ _ + - .`; no empty, `.`-led or `..` component:
    /// a name that can only be looked up under the database's directory.
    static func isNameShaped(_ text: String) -> Bool {
        guard (1...64).contains(text.utf8.count), text.first?.isLetter == true else { return false }
        guard text.utf8.allSatisfy({ b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2F || b == 0x5F || b == 0x2B || b == 0x2D || b == 0x2E
        }) else { return false }
        return text.split(separator: "/", omittingEmptySubsequences: false).allSatisfy { !$0.isEmpty && $0.first != "." }
    }
}
