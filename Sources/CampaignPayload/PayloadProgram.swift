import AudienceIngest
import CampaignIO
import CampaignJSON

/// One step of a compiled message. Every message of a job compiles into one
/// array of these over one byte table, so rendering a payload for a row is
/// copying bytes: keys, punctuation and literal text are escaped once, at
/// compile time; only variable values are escaped per row. Plain values, so
/// running the steps touches no reference count.
struct PayloadStep: Equatable, Sendable {
    enum Kind: UInt8, Sendable {
        /// Bytes `a..<a+b` of the table: JSON text, already escaped.
        case raw
        /// Variable `a`'s value, escaped into the inside of a JSON string.
        case escaped
        /// Variable `a`'s value as a JSON whole number (badge).
        case wholeNumber
        /// Bounds of the text that is shortened when the payload is too big.
        case shortenableStart
        case shortenableEnd
    }

    var kind: Kind
    var a: Int32
    var b: Int32
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
    /// Every variable any message uses; steps refer to them by index.
    public let variables: [String]

    /// Every message's steps, one after another, over one byte table.
    private let steps: [PayloadStep]
    private let table: [UInt8]
    /// Message `i`'s steps.
    private let messageSteps: [Range<Int>]

    public init(job: CampaignJob) {
        self.job = job
        var compiler = Compiler()
        messageSteps = job.messages.map { compiler.compile(aps: $0.aps, custom: job.custom) }
        variables = compiler.variables
        steps = compiler.steps
        table = compiler.table
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
        let range = messageSteps[index]
        // The steps and the table, borrowed for the whole render: no
        // reference count is touched per step.
        steps.withUnsafeBufferPointer { steps in
            table.withUnsafeBufferPointer { table in
                row.storage.withUnsafeBufferPointer { storage in
                    for step in steps[range] {
                        let a = Int(step.a)
                        switch step.kind {
                        case .raw:
                            out.append(table.baseAddress! + a, count: Int(step.b))
                        case .escaped:
                            guard let range = row.range(of: columns[a]) else { failure = .missingVariable(variables[a]); return }
                            out.appendJSONEscaped(UnsafeBufferPointer(rebasing: storage[range]))
                        case .wholeNumber:
                            guard let range = row.range(of: columns[a]) else { failure = .missingVariable(variables[a]); return }
                            guard Self.appendWholeNumber(UnsafeBufferPointer(rebasing: storage[range]), to: out) else {
                                failure = .invalidBadge(String(decoding: storage[range], as: UTF8.self))
                                return
                            }
                        case .shortenableStart: start = out.count
                        case .shortenableEnd: end = out.count
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

    /// Compiles messages into steps over one table, one message after another.
    struct Compiler {
        var variables: [String] = []
        var steps: [PayloadStep] = []
        var table: [UInt8] = []
        /// Literal JSON text not yet made a step.
        var pending: [UInt8] = []

        mutating func variable(_ name: String) -> Int32 {
            if let i = variables.firstIndex(of: name) { return Int32(i) }
            variables.append(name)
            return Int32(variables.count - 1)
        }

        mutating func raw(_ text: String) { pending.append(contentsOf: text.utf8) }
        mutating func raw(_ bytes: [UInt8]) { pending.append(contentsOf: bytes) }

        mutating func flush() {
            guard !pending.isEmpty else { return }
            steps.append(PayloadStep(kind: .raw, a: Int32(table.count), b: Int32(pending.count)))
            table += pending
            pending = []
        }

        mutating func emit(_ kind: PayloadStep.Kind, variable: Int32 = 0) {
            flush()
            steps.append(PayloadStep(kind: kind, a: variable, b: 0))
        }

        mutating func key(_ key: String) {
            JSONText.appendString(Array(key.utf8), to: &pending)
            raw(":")
        }

        /// A string value whose `{variables}` are filled per row.
        mutating func templateString(_ text: String, shortenable marks: Bool = false) {
            raw("\"")
            if marks { emit(.shortenableStart) }
            for part in (try? Template(text))?.parts ?? [.literal(Array(text.utf8))] {
                switch part {
                case .literal(let bytes): JSONText.appendEscaped(bytes, to: &pending)
                case .variable(let name): emit(.escaped, variable: variable(name))
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

        /// Compiles one message; returns the range of its steps.
        mutating func compile(aps: [(key: String, value: JSONValue)], custom: [(key: String, value: JSONValue)]) -> Range<Int> {
            let first = steps.count
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
                        emit(.wholeNumber, variable: variable(name))
                    } else {
                        // A literal like "3": already checked to be a whole number at load.
                        raw(String(Substring(text).trimmingWhitespace()))
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
            return first..<steps.count
        }
    }
}

extension Template {
    static func literalFallback(_ text: String) -> Template {
        // Only reached for text that failed to compile, which job loading refuses first.
        (try? Template(text.split(separator: "{", omittingEmptySubsequences: false).joined(separator: "{{"))) ?? (try! Template(""))
    }
}

extension ByteArena {
    /// ``JSONText/appendEscaped(buffer:to:)``, into the arena.
    @inline(__always)
    public func appendJSONEscaped(_ buffer: UnsafeBufferPointer<UInt8>) {
        JSONText.forEachEscapeRun(buffer, run: { append($0) }, escape: { b in JSONText.withEscape(of: b) { append($0) } })
    }
}
