/// Text with `{name}` variables filled from audience columns. `{{` and `}}`
/// stand for literal braces.
public struct Template: Sendable, Equatable {
    public enum Part: Sendable, Equatable {
        case literal([UInt8])
        case variable(String)
    }

    public let parts: [Part]

    /// The variables it uses, in order of first use.
    public var variables: [String] {
        var seen: [String] = []
        for case .variable(let name) in parts where !seen.contains(name) { seen.append(name) }
        return seen
    }

    public var isLiteral: Bool { parts.allSatisfy { if case .literal = $0 { true } else { false } } }

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
                let name = String(String.UnicodeScalarView(chars[..<close]))
                guard !name.isEmpty, name.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || $0.properties.numericType != nil || "_-.".unicodeScalars.contains($0) }) else {
                    throw SyntaxError(reason: "'{\(name)}' at character \(position) is not a variable name (letters, digits, _ - .)")
                }
                flush()
                parts.append(.variable(name))
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
        self.parts = parts
    }
}
