/// Text with `{name}` variables filled from audience columns. `{{` and `}}`
/// stand for literal braces.
///
/// A variable may say what to write when the row has no value (absent,
/// empty or null): `{first_name|there}`, and `{first_name|}` for nothing.
/// A JSON string that is exactly one variable may give it a type, and is then
/// written as a JSON number or boolean: `"{order_id:number}"`, `"{count:int}"`,
/// `"{vip:bool}"`, with a default too: `"{count:int|0}"`.
public struct Template: Sendable, Equatable {
    /// What a typed variable becomes in JSON.
    public enum ValueType: String, Sendable, CaseIterable {
        /// The text inside a JSON string (no type given).
        case text
        /// A JSON number: an integer or a decimal, as JSON writes them.
        case number
        /// A whole number (`-12`, `0012` is written 12).
        case int
        /// `true` or `false` (also `1`/`0`, `yes`/`no`, any case).
        case bool
    }

    public struct Variable: Sendable, Equatable {
        public var name: String
        public var type: ValueType
        /// What the row's value is replaced by when it has none; nil: the row is rejected.
        public var defaultValue: String?

        public init(name: String, type: ValueType = .text, defaultValue: String? = nil) {
            (self.name, self.type, self.defaultValue) = (name, type, defaultValue)
        }

        /// As written in a template: `{name:type|default}`.
        public var source: String {
            "{\(name)\(type == .text ? "" : ":\(type.rawValue)")\(defaultValue.map { "|\($0)" } ?? "")}"
        }
    }

    public enum Part: Sendable, Equatable {
        case literal([UInt8])
        case variable(Variable)
    }

    public let parts: [Part]

    /// The variables' names, in order of first use.
    public var variables: [String] {
        var seen: [String] = []
        for case .variable(let v) in parts where !seen.contains(v.name) { seen.append(v.name) }
        return seen
    }

    public var isLiteral: Bool { parts.allSatisfy { if case .literal = $0 { true } else { false } } }

    /// The one variable the whole template is, when it has a type (a JSON number or boolean).
    public var typedVariable: Variable? {
        guard parts.count == 1, case .variable(let v) = parts[0], v.type != .text else { return nil }
        return v
    }

    /// The built-in variable: the plan's time in UNIX seconds (`{now:int}`).
    public static let planTimeVariable = "now"

    /// Why a template cannot be compiled.
    public struct SyntaxError: Error, Equatable, Sendable {
        public var reason: String
    }

    public init(_ text: String) throws(SyntaxError) {
        var parts: [Part] = []
        var literal: [UInt8] = []
        var chars = Array(text.unicodeScalars)[...]
        var position = 0
        func flush() {
            if !literal.isEmpty { parts.append(.literal(literal)); literal = [] }
        }
        while let c = chars.first {
            chars = chars.dropFirst()
            position += 1
            switch c {
            case "{":
                if chars.first == "{" { chars = chars.dropFirst(); position += 1; literal.append(UInt8(ascii: "{")); continue }
                guard let close = chars.firstIndex(of: "}") else {
                    throw SyntaxError(reason: "'{' at character \(position) is never closed (write {{ for a literal brace)")
                }
                let inside = String(String.UnicodeScalarView(chars[..<close]))
                flush()
                parts.append(.variable(try Self.variable(inside, at: position)))
                position += chars.distance(from: chars.startIndex, to: close) + 1
                chars = chars[chars.index(after: close)...]
            case "}":
                if chars.first == "}" { chars = chars.dropFirst(); position += 1; literal.append(UInt8(ascii: "}")); continue }
                throw SyntaxError(reason: "'}' at character \(position) has no opening '{' (write }} for a literal brace)")
            default:
                literal.append(contentsOf: String(c).utf8)
            }
        }
        flush()
        for case .variable(let v) in parts where v.type != .text && parts.count > 1 {
            throw SyntaxError(reason: "'\(v.source)' has a type, so it must be the whole string (\"\(v.source)\") to become a JSON \(v.type == .bool ? "boolean" : "number")")
        }
        self.parts = parts
    }

    /// `name`, `name|default`, `name:type` or `name:type|default`.
    private static func variable(_ inside: String, at position: Int) throws(SyntaxError) -> Variable {
        let spec: Substring, defaultValue: String?
        if let bar = inside.firstIndex(of: "|") {
            (spec, defaultValue) = (inside[..<bar], String(inside[inside.index(after: bar)...]))
        } else {
            (spec, defaultValue) = (inside[...], nil)
        }
        let name: Substring, type: ValueType
        if let colon = spec.firstIndex(of: ":") {
            name = spec[..<colon]
            let typeName = String(spec[spec.index(after: colon)...])
            guard let t = ValueType(rawValue: typeName), t != .text else {
                throw SyntaxError(reason: "'{\(inside)}' at character \(position) has an unknown type \"\(typeName)\" (number, int or bool)")
            }
            type = t
        } else {
            (name, type) = (spec, .text)
        }
        guard !name.isEmpty, name.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || $0.properties.numericType != nil || "_-.".unicodeScalars.contains($0) }) else {
            throw SyntaxError(reason: "'{\(inside)}' at character \(position) is not a variable name (letters, digits, _ - .)")
        }
        let variable = Variable(name: String(name), type: type, defaultValue: defaultValue)
        if let defaultValue, type != .text, TypedValue.json(Array(defaultValue.utf8), as: type) == nil {
            throw SyntaxError(reason: "'{\(inside)}' at character \(position): the default \"\(defaultValue)\" is not \(type == .bool ? "a boolean" : type == .int ? "a whole number" : "a number")")
        }
        return variable
    }
}

/// A row's value as the JSON a typed variable writes.
public enum TypedValue {
    /// The JSON text of `value` as `type` (not `.text`), or nil when it is not one.
    /// Spaces around the value are ignored.
    public static func json(_ value: [UInt8], as type: Template.ValueType) -> [UInt8]? {
        value.withUnsafeBufferPointer { json($0, as: type) }
    }

    public static func json(_ value: UnsafeBufferPointer<UInt8>, as type: Template.ValueType) -> [UInt8]? {
        var start = 0, end = value.count
        while start < end, value[start] == 0x20 || value[start] == 0x09 { start += 1 }
        while end > start, value[end - 1] == 0x20 || value[end - 1] == 0x09 { end -= 1 }
        let v = UnsafeBufferPointer(rebasing: value[start..<end])
        switch type {
        case .text: return Array(v)
        case .int: return wholeNumber(v)
        case .number: return number(v)
        case .bool: return boolean(v)
        }
    }

    /// `-?[0-9]+`, at most 18 digits, leading zeros dropped.
    static func wholeNumber(_ v: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var i = 0
        let negative = v.first == UInt8(ascii: "-")
        if negative { i = 1 }
        guard v.count > i, v.count - i <= 18, v[i...].allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        while i < v.count - 1, v[i] == 0x30 { i += 1 }
        let digits = Array(v[i...])
        return negative && digits != [0x30] ? [UInt8(ascii: "-")] + digits : digits
    }

    /// A JSON number as RFC 8259 writes one (`-1.5e3`), at most 64 characters.
    static func number(_ v: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard !v.isEmpty, v.count <= 64 else { return nil }
        var i = 0
        func digits() -> Int {
            let from = i
            while i < v.count, (0x30...0x39).contains(v[i]) { i += 1 }
            return i - from
        }
        if v[i] == UInt8(ascii: "-") { i += 1 }
        guard i < v.count else { return nil }
        if v[i] == 0x30 { i += 1 } else if digits() == 0 { return nil }
        if i < v.count, v[i] == UInt8(ascii: ".") { i += 1; if digits() == 0 { return nil } }
        if i < v.count, v[i] == UInt8(ascii: "e") || v[i] == UInt8(ascii: "E") {
            i += 1
            if i < v.count, v[i] == UInt8(ascii: "+") || v[i] == UInt8(ascii: "-") { i += 1 }
            if digits() == 0 { return nil }
        }
        return i == v.count ? Array(v) : nil
    }

    static func boolean(_ v: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        switch String(decoding: v, as: UTF8.self).lowercased() {
        case "true", "1", "yes": Array("true".utf8)
        case "false", "0", "no": Array("false".utf8)
        default: nil
        }
    }
}
