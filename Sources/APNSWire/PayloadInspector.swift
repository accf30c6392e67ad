/// Checks a payload the way the gateway does: valid UTF-8 JSON whose top level
/// is an object holding an `aps` dictionary.
///
/// A hand-written scanner rather than a JSON parser, because the simulator runs
/// it on every notification at hundreds of thousands a second; it builds no
/// values and allocates nothing.
public enum PayloadInspector {
    /// What is wrong with a payload.
    public enum Problem: Hashable, Sendable, CustomStringConvertible {
        case invalidUTF8
        case invalidJSON(offset: Int)
        case notAnObject
        case missingAps
        case apsNotADictionary
        case nestedTooDeeply

        public var description: String {
            switch self {
            case .invalidUTF8: "the payload is not valid UTF-8"
            case .invalidJSON(let offset): "the payload is not valid JSON (at byte \(offset))"
            case .notAnObject: "the payload is not a JSON object"
            case .missingAps: "the payload has no \"aps\" key"
            case .apsNotADictionary: "the payload's \"aps\" value is not a dictionary"
            case .nestedTooDeeply: "the payload nests more than 64 levels deep"
            }
        }
    }

    /// Nil when the payload is acceptable, else the first problem found.
    public static func problem(in payload: some Collection<UInt8>) -> Problem? {
        if let fast = payload.withContiguousStorageIfAvailable({ problem(inBuffer: $0) }) { return fast }
        let copy = Array(payload)
        return copy.withUnsafeBufferPointer { problem(inBuffer: $0) }
    }

    static let maxDepth = 64

    private static func problem(inBuffer b: UnsafeBufferPointer<UInt8>) -> Problem? {
        guard isValidUTF8(b) else { return .invalidUTF8 }
        var scanner = Scanner(b: b)
        scanner.skipSpace()
        guard scanner.p < b.count, b[scanner.p] == UInt8(ascii: "{") else {
            return scanner.p < b.count && scanner.scanValue(depth: 0) && scanner.atEnd ? .notAnObject
                : .invalidJSON(offset: scanner.p)
        }
        // Walk the top-level object by hand to find "aps" and its type.
        var apsKind: UInt8? = nil
        scanner.p += 1
        scanner.skipSpace()
        if scanner.peek == UInt8(ascii: "}") {
            scanner.p += 1
        } else {
            while true {
                scanner.skipSpace()
                let keyStart = scanner.p
                guard scanner.scanString() else { return scanner.problem }
                let isAps = scanner.p - keyStart == 5 && b[keyStart + 1] == UInt8(ascii: "a")
                    && b[keyStart + 2] == UInt8(ascii: "p") && b[keyStart + 3] == UInt8(ascii: "s")
                scanner.skipSpace()
                guard scanner.peek == UInt8(ascii: ":") else { return .invalidJSON(offset: scanner.p) }
                scanner.p += 1
                scanner.skipSpace()
                if isAps { apsKind = scanner.peek }
                guard scanner.scanValue(depth: 1) else { return scanner.problem }
                scanner.skipSpace()
                if scanner.peek == UInt8(ascii: ",") { scanner.p += 1; continue }
                if scanner.peek == UInt8(ascii: "}") { scanner.p += 1; break }
                return .invalidJSON(offset: scanner.p)
            }
        }
        guard scanner.atEnd else { return .invalidJSON(offset: scanner.p) }
        guard let apsKind else { return .missingAps }
        return apsKind == UInt8(ascii: "{") ? nil : .apsNotADictionary
    }

    private struct Scanner {
        let b: UnsafeBufferPointer<UInt8>
        var p = 0
        var tooDeep = false

        var peek: UInt8 { p < b.count ? b[p] : 0 }

        var problem: Problem { tooDeep ? .nestedTooDeeply : .invalidJSON(offset: p) }

        var atEnd: Bool {
            mutating get { skipSpace(); return p == b.count }
        }

        mutating func skipSpace() {
            while p < b.count, b[p] == 0x20 || b[p] == 0x0a || b[p] == 0x0d || b[p] == 0x09 { p += 1 }
        }

        mutating func scanValue(depth: Int) -> Bool {
            guard depth < PayloadInspector.maxDepth else { tooDeep = true; return false }
            skipSpace()
            switch peek {
            case UInt8(ascii: "{"):
                p += 1; skipSpace()
                if peek == UInt8(ascii: "}") { p += 1; return true }
                while true {
                    skipSpace()
                    guard scanString() else { return false }
                    skipSpace()
                    guard peek == UInt8(ascii: ":") else { return false }
                    p += 1
                    guard scanValue(depth: depth + 1) else { return false }
                    skipSpace()
                    if peek == UInt8(ascii: ",") { p += 1; continue }
                    if peek == UInt8(ascii: "}") { p += 1; return true }
                    return false
                }
            case UInt8(ascii: "["):
                p += 1; skipSpace()
                if peek == UInt8(ascii: "]") { p += 1; return true }
                while true {
                    guard scanValue(depth: depth + 1) else { return false }
                    skipSpace()
                    if peek == UInt8(ascii: ",") { p += 1; continue }
                    if peek == UInt8(ascii: "]") { p += 1; return true }
                    return false
                }
            case UInt8(ascii: "\""):
                return scanString()
            case UInt8(ascii: "t"): return scanLiteral("true")
            case UInt8(ascii: "f"): return scanLiteral("false")
            case UInt8(ascii: "n"): return scanLiteral("null")
            default:
                return scanNumber()
            }
        }

        mutating func scanLiteral(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard b.count - p >= n else { return false }
            for i in 0..<n where b[p + i] != word.utf8Start[i] { return false }
            p += n
            return true
        }

        mutating func scanString() -> Bool {
            guard peek == UInt8(ascii: "\"") else { return false }
            p += 1
            while p < b.count {
                let c = b[p]
                if c == UInt8(ascii: "\"") { p += 1; return true }
                if c < 0x20 { return false }
                if c == UInt8(ascii: "\\") {
                    p += 1
                    guard p < b.count else { return false }
                    switch b[p] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                         UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        p += 1
                    case UInt8(ascii: "u"):
                        guard b.count - p >= 5 else { return false }
                        for i in 1...4 where DeviceToken.nibbleValue(b[p + i]) == nil { return false }
                        p += 5
                    default:
                        return false
                    }
                    continue
                }
                p += 1
            }
            return false
        }

        mutating func scanNumber() -> Bool {
            let start = p
            if peek == UInt8(ascii: "-") { p += 1 }
            if peek == UInt8(ascii: "0") {
                p += 1
            } else {
                guard scanDigits() else { p = start; return false }
            }
            if peek == UInt8(ascii: ".") {
                p += 1
                guard scanDigits() else { return false }
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                p += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { p += 1 }
                guard scanDigits() else { return false }
            }
            return true
        }

        mutating func scanDigits() -> Bool {
            let start = p
            while p < b.count, b[p] >= UInt8(ascii: "0"), b[p] <= UInt8(ascii: "9") { p += 1 }
            return p > start
        }
    }

    /// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
    public static func isValidUTF8(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        var i = 0
        let n = b.count
        guard let base = b.baseAddress else { return true }
        while i < n {
            // Eight ASCII bytes at a time: most audience text is ASCII.
            while n - i >= 8, UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                i += 8
            }
            guard i < n else { break }
            let c = b[i]
            if c < 0x80 { i += 1; continue }
            let count: Int
            var lower: UInt8 = 0x80, upper: UInt8 = 0xBF
            switch c {
            case 0xC2...0xDF: count = 1
            case 0xE0: count = 2; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: count = 2
            case 0xED: count = 2; upper = 0x9F
            case 0xF0: count = 3; lower = 0x90
            case 0xF1...0xF3: count = 3
            case 0xF4: count = 3; upper = 0x8F
            default: return false
            }
            guard n - i > count else { return false }
            let second = b[i + 1]
            guard second >= lower, second <= upper else { return false }
            var j = 2
            while j <= count {
                guard b[i + j] & 0xC0 == 0x80 else { return false }
                j += 1
            }
            i += count + 1
        }
        return true
    }
}
