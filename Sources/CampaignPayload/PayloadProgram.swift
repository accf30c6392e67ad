import AudienceIngest
import CampaignIO
import CampaignJSON

/// One message compiled to a list of appends, so rendering a payload for a
/// row is copying bytes: keys, punctuation and literal text are escaped once,
/// at compile time; only variable values are escaped per row.
public struct PayloadProgram: Sendable {
    enum Op: Sendable {
        /// JSON text, already escaped.
        case raw([UInt8])
        /// A variable's value, escaped into the inside of a JSON string.
        case escaped(variable: Int)
        /// A variable's value as a JSON whole number (badge).
        case wholeNumber(variable: Int)
        /// Bounds of the text that is shortened when the payload is too big.
        case shortenableStart
        case shortenableEnd
    }

    let ops: [Op]
    /// Whether the program marks text that may be shortened.
    public let hasShortenableText: Bool

    /// The same ops flattened for the hot path: (kind, a, b) triples over one
    /// byte table, so running them touches no reference counts.
    let flat: [Int]
    let table: [UInt8]

    static let rawKind = 0, escapedKind = 1, numberKind = 2, startKind = 3, endKind = 4

    init(ops: [Op], hasShortenableText: Bool) {
        self.ops = ops
        self.hasShortenableText = hasShortenableText
        var flat: [Int] = []
        var table: [UInt8] = []
        for op in ops {
            switch op {
            case .raw(let bytes): flat += [Self.rawKind, table.count, bytes.count]; table += bytes
            case .escaped(let v): flat += [Self.escapedKind, v, 0]
            case .wholeNumber(let v): flat += [Self.numberKind, v, 0]
            case .shortenableStart: flat += [Self.startKind, 0, 0]
            case .shortenableEnd: flat += [Self.endKind, 0, 0]
            }
        }
        self.flat = flat
        self.table = table
    }
}

/// What rendering a row produced.
public enum RenderOutcome: Equatable, Sendable {
    /// The payload fits as rendered.
    case fitted
    /// The text was shortened by this many bytes (plus the "…" added) to fit.
    case truncated(droppedBytes: Int)
    /// The row has no value for this variable.
    case missingVariable(String)
    /// The badge value is not a whole number of at least 0.
    case invalidBadge(String)
    /// Even with an empty text the payload needs this many bytes.
    case cannotFit(minimumBytes: Int)
}

/// Compiles a job's messages and renders payloads for audience rows.
public struct PayloadRenderer: Sendable {
    public let job: CampaignJob
    public let programs: [PayloadProgram]
    /// Every variable any message uses; programs refer to them by index.
    public let variables: [String]

    /// Every program's flat ops, one after another, over one byte table (the
    /// programs' own offsets moved): one borrow per render.
    private let flat: [Int]
    private let table: [UInt8]
    private let programOps: [Range<Int>]

    public init(job: CampaignJob) {
        self.job = job
        var compiler = Compiler()
        programs = job.messages.map { compiler.compile(aps: $0.aps, custom: job.custom) }
        variables = compiler.variables
        var flat: [Int] = [], table: [UInt8] = [], ranges: [Range<Int>] = []
        for program in programs {
            let start = flat.count
            for i in stride(from: 0, to: program.flat.count, by: 3) {
                let kind = program.flat[i]
                flat += [kind, kind == PayloadProgram.rawKind ? program.flat[i + 1] + table.count : program.flat[i + 1], program.flat[i + 2]]
            }
            table += program.table
            ranges.append(start..<flat.count)
        }
        self.flat = flat
        self.table = table
        programOps = ranges
    }

    /// Renders message `index` for `row` into `out` (cleared first), fitted to
    /// `maxBytes`. `columns[v]` is the audience column of variable `v`, or -1.
    public func render(
        message index: Int, row: AudienceRow, columns: [Int], maxBytes: Int, into out: inout [UInt8]
    ) -> RenderOutcome {
        let arena = ByteArena(capacity: 512)
        let outcome = render(message: index, row: row, columns: columns, maxBytes: maxBytes, appendingTo: arena)
        out = Array(arena.all)
        return outcome
    }

    /// Renders message `index` for `row` after what `out` already holds;
    /// `maxBytes` counts the payload's bytes only. When the outcome is a
    /// failure, what was appended is left for the caller to drop.
    public func render(
        message index: Int, row: AudienceRow, columns: [Int], maxBytes: Int, appendingTo out: ByteArena
    ) -> RenderOutcome {
        let base = out.count
        var start = -1, end = -1
        var failure: RenderOutcome? = nil
        let ops = programOps[index]
        // The flat tables of all programs, borrowed for the whole render: no
        // reference count is touched per op.
        flat.withUnsafeBufferPointer { flat in
            table.withUnsafeBufferPointer { table in
                row.storage.withUnsafeBufferPointer { storage in
                    var i = ops.lowerBound
                    while i < ops.upperBound {
                        let kind = flat[i], a = flat[i + 1], b = flat[i + 2]
                        i += 3
                        switch kind {
                        case PayloadProgram.rawKind:
                            out.append(table.baseAddress! + a, count: b)
                        case PayloadProgram.escapedKind:
                            guard let range = row.range(of: columns[a]) else { failure = .missingVariable(variables[a]); return }
                            out.appendJSONEscaped(UnsafeBufferPointer(rebasing: storage[range]))
                        case PayloadProgram.numberKind:
                            guard let range = row.range(of: columns[a]) else { failure = .missingVariable(variables[a]); return }
                            guard Self.appendWholeNumber(UnsafeBufferPointer(rebasing: storage[range]), to: out) else {
                                failure = .invalidBadge(String(decoding: storage[range], as: UTF8.self))
                                return
                            }
                        case PayloadProgram.startKind: start = out.count
                        default: end = out.count
                        }
                    }
                }
            }
        }
        if let failure { return failure }
        if out.count - base <= maxBytes { return .fitted }
        guard start >= 0, end >= start else { return .cannotFit(minimumBytes: out.count - base) }
        // Too big: rare, so the fitter works on a copy of the payload.
        var payload = out.copy(base..<out.count)
        let outcome = PayloadFitter.shorten(&payload, textRange: (start - base)..<(end - base), maxBytes: maxBytes)
        out.truncate(to: base)
        out.append(payload)
        return outcome
    }

    /// Appends digits with leading zeros removed; false unless the value is a whole number ≥ 0.
    static func appendWholeNumber(_ bytes: UnsafeBufferPointer<UInt8>, to out: ByteArena) -> Bool {
        var start = 0, end = bytes.count
        while start < end, bytes[start] == 0x20 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 { end -= 1 }
        guard end > start, end - start <= 9 else { return false }
        for i in start..<end where bytes[i] < 0x30 || bytes[i] > 0x39 { return false }
        while start < end - 1, bytes[start] == 0x30 { start += 1 }
        out.append(UnsafeBufferPointer(rebasing: bytes[start..<end]))
        return true
    }

    struct Compiler {
        var variables: [String] = []
        var ops: [PayloadProgram.Op] = []
        var pending: [UInt8] = []
        var shortenable = false

        mutating func variable(_ name: String) -> Int {
            if let i = variables.firstIndex(of: name) { return i }
            variables.append(name)
            return variables.count - 1
        }

        mutating func raw(_ text: String) { pending.append(contentsOf: text.utf8) }
        mutating func raw(_ bytes: [UInt8]) { pending.append(contentsOf: bytes) }

        mutating func flush() {
            if !pending.isEmpty { ops.append(.raw(pending)); pending = [] }
        }

        mutating func emit(_ op: PayloadProgram.Op) {
            flush()
            ops.append(op)
        }

        mutating func key(_ key: String) {
            JSONText.appendString(Array(key.utf8), to: &pending)
            raw(":")
        }

        /// A string value whose `{variables}` are filled per row.
        mutating func templateString(_ text: String, shortenable marks: Bool = false) {
            raw("\"")
            if marks { emit(.shortenableStart); shortenable = true }
            for part in (try? Template(text))?.parts ?? [.literal(Array(text.utf8))] {
                switch part {
                case .literal(let bytes): JSONText.appendEscaped(bytes, to: &pending)
                case .variable(let name): emit(.escaped(variable: variable(name)))
                }
            }
            if marks { emit(.shortenableEnd) }
            raw("\"")
        }

        /// Any JSON value, with templates inside strings.
        mutating func value(_ value: JSONValue) {
            switch value {
            case .string(let s): templateString(s)
            case .array(let items):
                raw("[")
                for (i, item) in items.enumerated() {
                    if i > 0 { raw(",") }
                    self.value(item)
                }
                raw("]")
            case .object(let members):
                raw("{")
                for (i, member) in members.enumerated() {
                    if i > 0 { raw(",") }
                    key(member.key)
                    self.value(member.value)
                }
                raw("}")
            default:
                raw(value.serialized())
            }
        }

        mutating func compile(aps: [(key: String, value: JSONValue)], custom: [(key: String, value: JSONValue)]) -> PayloadProgram {
            ops = []
            pending = []
            shortenable = false
            raw("{")
            key("aps")
            raw("{")
            for (i, (k, v)) in aps.enumerated() {
                if i > 0 { raw(",") }
                key(k)
                switch (k, v) {
                case ("alert", .string(let text)):
                    templateString(text, shortenable: true)
                case ("alert", .object(let members)):
                    let hasBody = members.contains { $0.key == "body" }
                    raw("{")
                    for (j, (ak, av)) in members.enumerated() {
                        if j > 0 { raw(",") }
                        key(ak)
                        switch (ak, av) {
                        case ("body", .string(let text)):
                            templateString(text, shortenable: true)
                        case ("loc-args", .array(let args)) where !hasBody:
                            // Without a body, the last argument is the text that gives way.
                            raw("[")
                            for (n, arg) in args.enumerated() {
                                if n > 0 { raw(",") }
                                templateString(arg.stringValue ?? "", shortenable: n == args.count - 1)
                            }
                            raw("]")
                        default:
                            value(av)
                        }
                    }
                    raw("}")
                case ("badge", .string(let text)):
                    let template = (try? Template(text)) ?? Template.literalFallback(text)
                    if case .variable(let name)? = template.parts.first, template.parts.count == 1 {
                        emit(.wholeNumber(variable: variable(name)))
                    } else {
                        // A literal like "3": already checked to be a whole number at load.
                        raw(text.trimmingCharacters(in: " "))
                    }
                default:
                    value(v)
                }
            }
            raw("}")
            for (k, v) in custom {
                raw(",")
                key(k)
                value(v)
            }
            raw("}")
            flush()
            return PayloadProgram(ops: ops, hasShortenableText: shortenable)
        }
    }
}

extension Template {
    static func literalFallback(_ text: String) -> Template {
        // Only reached for text that failed to compile, which job loading refuses first.
        (try? Template(text.replacingOccurrences(of: "{", with: "{{"))) ?? (try! Template(""))
    }
}

extension String {
    func trimmingCharacters(in set: Character) -> String {
        var s = Substring(self)
        while s.first == set { s = s.dropFirst() }
        while s.last == set { s = s.dropLast() }
        return String(s)
    }

    func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

extension ByteArena {
    /// ``JSONText/appendEscaped(buffer:to:)``, into the arena.
    @inline(__always)
    public func appendJSONEscaped(_ buffer: UnsafeBufferPointer<UInt8>) {
        JSONText.forEachEscapeRun(buffer, run: { append($0) }, escape: { b in JSONText.withEscape(of: b) { append($0) } })
    }
}
