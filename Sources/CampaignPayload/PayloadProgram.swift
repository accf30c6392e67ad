#if canImport(Glibc)
import Glibc
#endif
import AudienceIngest
import CampaignIO
import CampaignJSON
import ByteStreams

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
        /// Variable `a`'s value as a JSON whole number of at least 0 (badge).
        case wholeNumber
        /// Variable `a`'s value as a JSON number, a whole number, or a boolean.
        case number, integer, boolean
        /// Variable `a`'s value as a channel id, in canonical base64 (`input-push-channel`).
        case channelID
        /// Bounds of the text that is shortened when the payload is too big.
        case shortenableStart
        case shortenableEnd
    }

    var kind: Kind
    var a: Int32
    var b: Int32
    /// For a variable: its default's JSON text in the table, bytes `b..<b+c`; b is -1 without one.
    var c: Int32 = 0
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
    /// A typed variable's value is not of its type.
    case invalidValue(variable: String, type: Template.ValueType, value: String)
    /// The value for `input-push-channel` is not a channel id (canonical base64).
    case invalidChannelID(variable: String, value: String)
    /// Even with an empty text the payload needs this many bytes.
    case cannotFit(minimumBytes: Int)
}

/// Compiles a job's messages and renders payloads for audience rows.
public struct PayloadRenderer: Sendable {
    public let job: CampaignJob
    /// Every variable any message uses; steps refer to them by index.
    public let variables: [String]
    /// Each variable as first written (its type and default), in the same order.
    public let declarations: [Template.Variable]
    /// The variables used somewhere without a default: a row without them is rejected.
    public let requiredVariables: [String]

    /// Every message's steps, one after another, over one byte table.
    private let steps: [PayloadStep]
    private let table: [UInt8]
    /// Message `i`'s steps.
    private let messageSteps: [Range<Int>]

    /// `now`: the plan's time, which `{now}` and `{now:int}` write (UNIX
    /// seconds). A scheduled job's records go at their moments, hours later,
    /// and `{now}` is each one's moment: with `nowAtMoment` it writes
    /// ``momentPlaceholder`` (as wide as the seconds), which the planner
    /// replaces once the record's moment is known (``writeMoment(_:into:)``).
    public init(job: CampaignJob, now: UInt32 = UInt32(clamping: Int(time(nil))), nowAtMoment: Bool = false) {
        self.job = job
        var compiler = Compiler(now: nowAtMoment ? Self.momentPlaceholder : Array(String(now).utf8))
        messageSteps = job.messages.map { compiler.compile(aps: $0.aps, custom: job.custom) }
        variables = compiler.variables
        declarations = compiler.declarations
        requiredVariables = compiler.variables.filter(compiler.required.contains)
        steps = compiler.steps
        table = compiler.table
        usesNow = compiler.usesNow
    }

    /// Some message writes `{now}`.
    public let usesNow: Bool

    /// What `{now}` writes for a scheduled job until the record's moment is
    /// known: ten bytes, as wide as UNIX seconds until 2286, starting and
    /// ending with a control byte that no rendered JSON holds unescaped.
    public static let momentPlaceholder: [UInt8] = [0x01] + Array("{moment}".utf8) + [0x01]

    /// Writes `moment` over every ``momentPlaceholder`` in `line`.
    public static func writeMoment(_ moment: Int64, into line: inout [UInt8]) {
        let digits = Array(String(moment).utf8)
        guard digits.count == momentPlaceholder.count else { return }
        var i = 0
        while let start = line[i...].firstIndex(of: 0x01) {
            if start + momentPlaceholder.count <= line.count, line[start..<(start + momentPlaceholder.count)].elementsEqual(momentPlaceholder) {
                line.replaceSubrange(start..<(start + momentPlaceholder.count), with: digits)
                i = start + digits.count
            } else {
                i = start + 1
            }
        }
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
        var defaulted: UInt64 = 0
        return render(message: index, row: row, columns: columns, maxBytes: maxBytes, appendingTo: out, defaulted: &defaulted)
    }

    /// As above; sets bit `v` of `defaulted` for each variable `v` (below 64)
    /// whose default was written because the row had no value.
    public func render(
        message index: Int, row: AudienceRow, columns: [Int], maxBytes: Int, appendingTo out: ByteArena, defaulted: inout UInt64
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
                        case .escaped, .wholeNumber, .number, .integer, .boolean, .channelID:
                            guard let range = row.range(of: columns[a]) else {
                                // No value: the default's JSON text, or the row is rejected.
                                guard step.b >= 0 else { failure = .missingVariable(variables[a]); return }
                                out.append(table.baseAddress! + Int(step.b), count: Int(step.c))
                                if a < 64 { defaulted |= 1 << UInt64(a) }
                                continue
                            }
                            let value = UnsafeBufferPointer(rebasing: storage[range])
                            switch step.kind {
                            case .escaped: out.appendJSONEscaped(value)
                            case .channelID:
                                guard Self.appendChannelID(value, to: out) else {
                                    failure = .invalidChannelID(variable: variables[a], value: String(decoding: value.prefix(64), as: UTF8.self))
                                    return
                                }
                            case .wholeNumber:
                                guard Self.appendWholeNumber(value, to: out) else {
                                    failure = .invalidBadge(String(decoding: value, as: UTF8.self))
                                    return
                                }
                            default:
                                let type: Template.ValueType = step.kind == .number ? .number : step.kind == .integer ? .int : .bool
                                guard let json = TypedValue.json(value, as: type) else {
                                    failure = .invalidValue(variable: variables[a], type: type, value: String(decoding: value.prefix(64), as: UTF8.self))
                                    return
                                }
                                out.append(json)
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
        /// What `{now}` writes.
        let now: [UInt8]
        var variables: [String] = []
        var declarations: [Template.Variable] = []
        var required: Set<String> = []
        var steps: [PayloadStep] = []
        var table: [UInt8] = []
        /// Literal JSON text not yet made a step.
        var pending: [UInt8] = []
        /// Some message writes `{now}`.
        var usesNow = false

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

        /// A variable's step, with its default's JSON text (escaped, or as
        /// its type writes it) in the table; the plan time for `{now}`.
        mutating func emit(_ kind: PayloadStep.Kind, _ v: Template.Variable) {
            if v.name == Template.planTimeVariable {
                raw(now)
                usesNow = true
                return
            }
            flush()
            var step = PayloadStep(kind: kind, a: variable(v.name), b: -1)
            if declarations.count < variables.count { declarations.append(v) }
            if v.defaultValue == nil { required.insert(v.name) }
            if let text = v.defaultValue {
                var json: [UInt8] = []
                switch kind {
                case .escaped, .channelID: JSONText.appendEscaped(Array(text.utf8), to: &json)
                case .wholeNumber: json = TypedValue.json(Array(text.utf8), as: .int) ?? Array("0".utf8)
                default: json = TypedValue.json(Array(text.utf8), as: v.type) ?? []
                }
                (step.b, step.c) = (Int32(table.count), Int32(json.count))
                table += json
            }
            steps.append(step)
        }

        mutating func key(_ key: String) {
            JSONText.appendString(Array(key.utf8), to: &pending)
            raw(":")
        }

        /// A string value whose `{variables}` are filled per row.
        mutating func templateString(_ text: String, shortenable marks: Bool = false) {
            // One typed variable: a JSON number or boolean, not a string.
            if !marks, let typed = (try? Template(text))?.typedVariable {
                emit(typed.type == .bool ? .boolean : typed.type == .int ? .integer : .number, typed)
                return
            }
            raw("\"")
            if marks { emit(.shortenableStart) }
            for part in (try? Template(text))?.parts ?? [.literal(Array(text.utf8))] {
                switch part {
                case .literal(let bytes): JSONText.appendEscaped(bytes, to: &pending)
                case .variable(let v): emit(.escaped, v)
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
                case ("input-push-channel", .string(let text)) where (try? Template(text))?.isLiteral == false:
                    // One variable, checked at load: each row's value is checked as it is written.
                    if case .variable(let v)? = (try? Template(text))?.parts.first { raw("\""); emit(.channelID, v); raw("\"") }
                case ("badge", .string(let text)):
                    let template = (try? Template(text)) ?? Template.literalFallback(text)
                    if case .variable(let v)? = template.parts.first, template.parts.count == 1 {
                        emit(.wholeNumber, v)
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
