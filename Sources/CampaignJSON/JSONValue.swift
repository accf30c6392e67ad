/// A JSON value that keeps what Foundation's parser loses: the order of object
/// keys, the exact text of numbers, and the difference between `1` and `true`.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number as written, e.g. `3`, `-2.50`, `1e3`.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Keys in document order. Duplicate keys are refused by the parser.
    case object([(key: String, value: JSONValue)])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)):
            x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// The value for `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The value as an integer, when it is a number without fraction or exponent.
    public var integerValue: Int64? {
        if case .number(let text) = self { return Int64(text) }
        return nil
    }

    /// The value as a floating-point number, when it is a number.
    public var doubleValue: Double? {
        if case .number(let text) = self { return Double(text) }
        return nil
    }

    public var objectMembers: [(key: String, value: JSONValue)]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// A short name of the value's type, for messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Compact JSON text: no whitespace, keys in order, non-ASCII as UTF-8.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        serialize(into: &out)
        return out
    }

    public func serialize(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let text): out.append(contentsOf: text.utf8)
        case .string(let s): JSONText.appendString(Array(s.utf8), to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.serialize(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, member) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(Array(member.key.utf8), to: &out)
                out.append(UInt8(ascii: ":"))
                member.value.serialize(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}

/// Why a JSON text could not be parsed, with the byte offset.
public struct JSONParseError: Error, Equatable, Sendable, CustomStringConvertible {
    public var offset: Int
    public var reason: String

    public var description: String { "\(reason) at byte \(offset + 1)" }
}

extension JSONValue {
    /// Parses one JSON value that fills `bytes` (surrounding whitespace allowed).
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        var result: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            return Result { () throws(JSONParseError) in try parser.parseDocument() }
        }
        if result == nil {
            let copy = Array(bytes)
            result = copy.withUnsafeBufferPointer { buffer in
                var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
                return Result { () throws(JSONParseError) in try parser.parseDocument() }
            }
        }
        return try result!.get()
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }
}

struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var p = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { p = 3 }
        let value = try parseValue(depth: 0)
        skipSpace()
        guard p == bytes.count else { throw fail("unexpected text after the JSON value") }
        return value
    }

    func fail(_ reason: String) -> JSONParseError { JSONParseError(offset: p, reason: reason) }

    var peek: UInt8? { p < bytes.count ? bytes[p] : nil }

    mutating func skipSpace() {
        while p < bytes.count, bytes[p] == 0x20 || bytes[p] == 0x0A || bytes[p] == 0x0D || bytes[p] == 0x09 { p += 1 }
    }

    mutating func expect(_ c: UInt8, _ what: String) throws(JSONParseError) {
        skipSpace()
        guard peek == c else { throw fail("expected \(what)") }
        p += 1
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < maxDepth else { throw fail("nested more than \(maxDepth) levels deep") }
        skipSpace()
        guard let c = peek else { throw fail("unexpected end of JSON") }
        switch c {
        case UInt8(ascii: "{"):
            p += 1
            var members: [(key: String, value: JSONValue)] = []
            var seen = Set<String>()
            skipSpace()
            if peek == UInt8(ascii: "}") { p += 1; return .object(members) }
            while true {
                skipSpace()
                guard peek == UInt8(ascii: "\"") else { throw fail("expected a string key") }
                let keyOffset = p
                let key = try parseString()
                guard seen.insert(key).inserted else {
                    throw JSONParseError(offset: keyOffset, reason: "duplicate key \"\(key)\"")
                }
                try expect(UInt8(ascii: ":"), "':' after a key")
                members.append((key, try parseValue(depth: depth + 1)))
                skipSpace()
                if peek == UInt8(ascii: ",") { p += 1; continue }
                if peek == UInt8(ascii: "}") { p += 1; return .object(members) }
                throw fail("expected ',' or '}' in an object")
            }
        case UInt8(ascii: "["):
            p += 1
            var items: [JSONValue] = []
            skipSpace()
            if peek == UInt8(ascii: "]") { p += 1; return .array(items) }
            while true {
                items.append(try parseValue(depth: depth + 1))
                skipSpace()
                if peek == UInt8(ascii: ",") { p += 1; continue }
                if peek == UInt8(ascii: "]") { p += 1; return .array(items) }
                throw fail("expected ',' or ']' in an array")
            }
        case UInt8(ascii: "\""):
            return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        default:
            return .number(try parseNumber())
        }
    }

    mutating func literal(_ word: String) throws(JSONParseError) {
        for c in word.utf8 {
            guard peek == c else { throw fail("invalid literal") }
            p += 1
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> String {
        let start = p
        if peek == UInt8(ascii: "-") { p += 1 }
        guard let first = peek, first >= 0x30, first <= 0x39 else { p = start; throw fail("invalid value") }
        if first == 0x30 {
            p += 1
        } else {
            while let d = peek, d >= 0x30, d <= 0x39 { p += 1 }
        }
        if peek == UInt8(ascii: ".") {
            p += 1
            let digits = p
            while let d = peek, d >= 0x30, d <= 0x39 { p += 1 }
            guard p > digits else { throw fail("a digit must follow the decimal point") }
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            p += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { p += 1 }
            let digits = p
            while let d = peek, d >= 0x30, d <= 0x39 { p += 1 }
            guard p > digits else { throw fail("a digit must follow the exponent") }
        }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<p]), as: UTF8.self)
    }

    /// Parses a string at `p` (which holds the opening quote), validating UTF-8.
    mutating func parseString() throws(JSONParseError) -> String {
        p += 1
        var out: [UInt8] = []
        var runStart = p
        while p < bytes.count {
            let c = bytes[p]
            if c == UInt8(ascii: "\"") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<p]))
                p += 1
                guard let s = String(validating: out, as: UTF8.self) else {
                    throw JSONParseError(offset: runStart, reason: "invalid UTF-8 in a string")
                }
                return s
            }
            if c < 0x20 { throw fail("control character in a string") }
            if c == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<p]))
                p += 1
                guard let e = peek else { break }
                p += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard peek == UInt8(ascii: "\\"), p + 1 < bytes.count, bytes[p + 1] == UInt8(ascii: "u") else {
                            throw fail("unpaired surrogate in a string")
                        }
                        p += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("unpaired surrogate in a string") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        throw fail("unpaired surrogate in a string")
                    }
                    out.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
                default:
                    p -= 1
                    throw fail("invalid escape in a string")
                }
                runStart = p
                continue
            }
            p += 1
        }
        throw fail("unterminated string")
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - p >= 4 else { throw fail("incomplete \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[p]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            p += 1
        }
        return v
    }
}
