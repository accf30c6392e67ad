/// The columns of an audience: CSV header names, or NDJSON keys in the order
/// they were first seen.
public final class AudienceSchema {
    public private(set) var names: [String] = []
    private var index: [String: Int] = [:]

    public init(names: [String] = []) {
        for name in names { _ = add(name) }
    }

    public var count: Int { names.count }

    /// The column with this exact name.
    public func column(named name: String) -> Int? { index[name] }

    /// The first column whose name matches one of `aliases`, ignoring case.
    public func column(anyOf aliases: [String]) -> Int? {
        columns(anyOf: aliases).first
    }

    /// Every column whose name matches one of `aliases`, ignoring case, in
    /// the order of `aliases`.
    public func columns(anyOf aliases: [String]) -> [Int] {
        var found: [Int] = []
        for alias in aliases.map({ $0.lowercased() }) {
            for (i, name) in names.enumerated() where name.lowercased() == alias && !found.contains(i) { found.append(i) }
        }
        return found
    }

    /// The column's index, adding it when new.
    @discardableResult
    public func add(_ name: String) -> Int {
        if let i = index[name] { return i }
        names.append(name)
        index[name] = names.count - 1
        return names.count - 1
    }

    /// Names of the token, language and registration columns, as the README documents them.
    public static let tokenAliases = ["token", "device_token"]
    /// A broadcast audience's channel column.
    public static let channelAliases = ["channel_id", "channel"]
    public static let languageAliases = ["lang", "language", "locale"]
    public static let registeredAliases = ["registered_at"]
    public static let timeZoneAliases = ["tz", "timezone", "time_zone"]
}

/// Our names for an audience's columns, mapped to the export's: a job's
/// `columns` and `plan --column NAME=SOURCE`. A NDJSON source may name a
/// nested key by its path (`user.first_name`). Names not mapped are looked
/// up as they are (the token, language and registration columns by their
/// accepted names).
public struct ColumnMapping: Sendable, Equatable {
    /// Our name → the export's column or key.
    public var sources: [String: String]

    public init(_ sources: [String: String] = [:]) { self.sources = sources }

    /// Our names with a meaning of their own; the others are template variables.
    public static let reservedNames = ["token", "lang", "registered_at", "tz"]
    /// A broadcast audience's: a channel per row, and what it stores (`none` or `most-recent`, when known).
    public static let channelReservedNames = ["channel_id", "lang", "storage", "tz"]

    /// What each row names: a device (its token) or, for a broadcast, a channel (its id).
    public enum TokenKind: Sendable, Equatable { case device, channel }
    public var tokenKind = TokenKind.device

    /// The names the token column may have (a broadcast's: the channel id's).
    public var tokenNames: [String] {
        switch tokenKind {
        case .device: sources["token"].map { [$0] } ?? AudienceSchema.tokenAliases
        case .channel: sources["channel_id"].map { [$0] } ?? AudienceSchema.channelAliases
        }
    }
    /// A broadcast audience's `storage` column, when it has one.
    public var storageNames: [String] { sources["storage"].map { [$0] } ?? ["storage"] }
    /// The language columns, first non-empty wins.
    public var languageNames: [String] { sources["lang"].map { [$0] } ?? AudienceSchema.languageAliases }
    public var registeredNames: [String] { sources["registered_at"].map { [$0] } ?? AudienceSchema.registeredAliases }
    /// The device's time zone (scheduled jobs): `tz`, `timezone` or `time_zone`, or the mapped column.
    public var timeZoneNames: [String] { sources["tz"].map { [$0] } ?? AudienceSchema.timeZoneAliases }

    /// The column a template variable reads.
    public func source(of variable: String) -> String { sources[variable] ?? variable }

    /// This mapping with `other`'s entries in place of its own.
    public func overridden(by other: ColumnMapping) -> ColumnMapping {
        var merged = ColumnMapping(sources.merging(other.sources) { $1 })
        merged.tokenKind = tokenKind
        return merged
    }

    /// What the token was looked for under, for an error: "token or device_token", "device_id (mapped)".
    public var tokenDescription: String {
        switch tokenKind {
        case .device: sources["token"].map { "\"\($0)\" (the mapped token column)" } ?? AudienceSchema.tokenAliases.joined(separator: " or ")
        case .channel: sources["channel_id"].map { "\"\($0)\" (the mapped channel id column)" } ?? AudienceSchema.channelAliases.joined(separator: " or ")
        }
    }
}

/// One audience row: its source line and its values, held in one byte arena
/// that is reused from row to row.
public struct AudienceRow {
    /// The line the row starts on (1-based).
    public internal(set) var line = 0
    public internal(set) var storage: [UInt8] = []
    /// (start, end) per column; start -1 when the row has no value there.
    /// An empty value (start == end) counts as absent.
    var bounds: [Int] = []

    public init() {}

    /// A row with these values by column (nil: absent), for tests and samples.
    public init(line: Int, values: [String?]) {
        reset(line: line, columns: values.count)
        for (i, v) in values.enumerated() {
            if let v { set(column: i, Array(v.utf8)) }
        }
    }

    mutating func reset(line: Int, columns: Int) {
        self.line = line
        storage.removeAll(keepingCapacity: true)
        bounds.removeAll(keepingCapacity: true)
        for _ in 0..<columns { bounds.append(-1); bounds.append(-1) }
    }

    mutating func set(column: Int, _ bytes: UnsafeRawBufferPointer) {
        while bounds.count < column * 2 + 2 { bounds.append(-1) }
        let start = storage.count
        storage.append(contentsOf: bytes)
        bounds[column * 2] = start
        bounds[column * 2 + 1] = storage.count
    }

    mutating func set(column: Int, _ bytes: some Collection<UInt8>) {
        while bounds.count < column * 2 + 2 { bounds.append(-1) }
        let start = storage.count
        storage.append(contentsOf: bytes)
        bounds[column * 2] = start
        bounds[column * 2 + 1] = storage.count
    }

    /// The value's bounds in ``storage``, or nil when absent or empty.
    @inline(__always)
    public func range(of column: Int?) -> Range<Int>? {
        guard let column, column >= 0, column * 2 < bounds.count else { return nil }
        let start = bounds[column * 2]
        guard start >= 0 else { return nil }
        let end = bounds[column * 2 + 1]
        return end > start ? start..<end : nil
    }

    /// The value's bytes, or nil when absent or empty.
    public func value(_ column: Int?) -> ArraySlice<UInt8>? {
        range(of: column).map { storage[$0] }
    }

    /// The value as text, for messages and slow paths.
    public func string(_ column: Int?) -> String? {
        value(column).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// What an audience reader produced.
public enum AudienceRecord {
    /// A row is ready in the caller's ``AudienceRow``.
    case row
    /// A row that could not be read; it never stops the run.
    case malformed(line: Int, reason: String, token: String?)
}

/// An audience file that cannot be used at all.
public struct AudienceError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong with the export; tests match these, the sentence is ``description``'s.
    public enum Reason: Equatable, Sendable {
        /// No header row at all.
        case empty
        /// The header row cannot be tokenized (`detail`: the tokenizer's words).
        case malformedHeader(line: Int, detail: String)
        /// The header's column at this position (1-based) has no name.
        case unnamedColumn(position: Int)
        case duplicateColumn(name: String)
        /// No token column: `named` is the name the job or `--column` gave it
        /// (nil: none of the usual names); `hint` what else may be wrong ("" or "; …");
        /// `channel`: a broadcast's audience, whose rows name channels.
        case noTokenColumn(named: String?, columns: [String], hint: String, channel: Bool = false)
        /// NDJSON: none of the first `rows` rows has a token under `tokenKey`'s description.
        case noTokenKey(tokenKey: String, rows: Int, keys: String)
        /// The header lacks the columns of variables every message needs.
        case noColumnForVariables([String], columns: [String])

        /// The reason as the sentence after the path.
        public var sentence: String {
            switch self {
            case .empty: "is empty: it has no header row"
            case .malformedHeader(let line, let detail): "line \(line): the header row is malformed: \(detail)"
            case .unnamedColumn(let position): "line 1: column \(position) of the header has no name"
            case .duplicateColumn(let name): "line 1: the header names column \"\(name)\" twice"
            case .noTokenColumn(let named, let columns, let hint, let channel):
                "has \(named.map { "no column \"\($0)\" (the job's or --column's \(channel ? "channel_id" : "token"))" } ?? (channel ? "no channel_id column" : "no token column")) (its columns are: \(columns.joined(separator: ", ")))\(hint)"
            case .noTokenKey(let tokenKey, let rows, let keys):
                "has no token under \(tokenKey) in its first \(rows) rows (its keys are: \(keys)); map it with the job's \"columns\" or plan --column token=KEY"
            case .noColumnForVariables(let missing, let columns):
                "line 1: the header has no column for the job's variable\(missing.count == 1 ? "" : "s") \(missing.map { "{\($0)}" }.joined(separator: ", ")), so every row using \(missing.count == 1 ? "it" : "them") would be rejected (its columns are: \(columns.joined(separator: ", ")))"
            }
        }
    }

    public var path: String
    public var reason: Reason

    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "\(path): \(reason.sentence)." }
}

/// Reads audience rows one at a time.
public protocol AudienceReader: AnyObject {
    var schema: AudienceSchema { get }
    /// Reads the next row into `row`; nil at the end.
    func next(into row: inout AudienceRow) throws -> AudienceRecord?
}
