/// A device token in binary form, as the device registered it.
///
/// Tokens are opaque bytes: 32 for the simple and enhanced formats, up to 100
/// for frames. Providers usually store them as hex text, sometimes in the form
/// `NSData.description` prints (`<740f4707 bebcf74f ...>`); ``init(hex:)``
/// accepts all of those.
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    /// The token's bytes.
    public var bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Parses hex text in either case, ignoring spaces and tabs around it and
    /// between byte groups, and one pair of enclosing angle brackets. Returns
    /// nil for anything else: odd digit counts, other characters, or an empty
    /// token. The same rules as ``parseHex(_:into:maxBytes:)``, which the
    /// planner uses.
    public init?(hex text: some StringProtocol) {
        var text = String(text)
        let parsed = text.withUTF8 { utf8 -> [UInt8]? in
            let capacity = max(1, utf8.count / 2)
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { out -> [UInt8]? in
                guard case .bytes(let n) = DeviceToken.parseHex(utf8, into: out.baseAddress!, maxBytes: capacity) else { return nil }
                return Array(out[..<n])
            }
        }
        guard let parsed else { return nil }
        bytes = parsed
    }

    /// What ``parseHex(_:into:maxBytes:)`` found.
    public enum HexParse: Equatable, Sendable {
        /// This many bytes were written.
        case bytes(Int)
        /// Nothing but spaces (and brackets).
        case empty
        /// A character that is not a hex digit, or a digit left over (odd count, or a space inside a byte).
        case notHex
        /// More than `maxBytes` bytes.
        case tooLong
    }

    /// The one hex token parser: bare hex, or hex as logs, spreadsheets and
    /// `NSData.description` give it (`"  <740f4707 bebcf74f …> "`). Writes at
    /// most `maxBytes` bytes to `out`.
    @inlinable
    public static func parseHex(_ text: UnsafeBufferPointer<UInt8>, into out: UnsafeMutablePointer<UInt8>, maxBytes: Int) -> HexParse {
        // Nearly every token is bare hex: decoded by table, in one pass.
        if !text.isEmpty, text.count <= 2 * maxBytes, HexEncoding.decodePairs(text, into: out) { return .bytes(text.count / 2) }
        var bytes = text[...]
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
        if bytes.first == UInt8(ascii: "<") {
            guard bytes.count >= 2, bytes.last == UInt8(ascii: ">") else { return .notHex }
            bytes = bytes.dropFirst().dropLast()
        }
        var count = 0
        var high: UInt8 = 0
        var haveHigh = false
        for c in bytes {
            if c == 0x20 || c == 0x09 {
                // A space may separate byte groups but never split a byte.
                if haveHigh { return .notHex }
                continue
            }
            guard let n = nibbleValue(c) else { return .notHex }
            if haveHigh {
                guard count < maxBytes else { return .tooLong }
                out[count] = high << 4 | n
                count += 1
                haveHigh = false
            } else {
                high = n
                haveHigh = true
            }
        }
        if haveHigh { return .notHex }
        return count == 0 ? .empty : .bytes(count)
    }

    /// Lower-case hex, two digits a byte, no separators.
    public var hex: String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        HexEncoding.append(bytes, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Tokens are identifiers of people's devices: print only a short prefix.
    public var description: String {
        let prefix = bytes.prefix(4).map { HexEncoding.byteHex($0) }.joined()
        return "DeviceToken(\(prefix)…, \(bytes.count) bytes)"
    }

    /// The value of one hex digit, or nil.
    @inlinable @inline(__always)
    public static func nibbleValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c &- 0x30
        case 0x61...0x66: c &- 0x57
        case 0x41...0x46: c &- 0x37
        default: nil
        }
    }

}

/// Lower-case hex encoding into a byte buffer, for hot paths that must not
/// allocate a String per token.
public enum HexEncoding {
    @usableFromInline
    static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends two lower-case hex digits per byte, in one copy.
    @inlinable
    public static func append(_ bytes: some Collection<UInt8>, to out: inout [UInt8]) {
        let count = bytes.count
        guard count > 0 else { return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count * 2) { scratch in
            digits.withUnsafeBufferPointer { d in
                var i = 0
                for b in bytes {
                    scratch[i] = d[Int(b >> 4)]
                    scratch[i + 1] = d[Int(b & 0x0f)]
                    i += 2
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(scratch))
        }
    }

    /// Hex digit values by byte (either case); 0xFF for bytes that are not hex digits.
    public static let digitValues: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "0123456789abcdef".utf8.enumerated() { table[Int(c)] = UInt8(i) }
        for (i, c) in "ABCDEF".utf8.enumerated() { table[Int(c)] = UInt8(10 + i) }
        return table
    }()

    /// Decodes `text`, two digits per byte with nothing between them, into
    /// `out` (room for `text.count / 2` bytes); false when a byte is not a
    /// hex digit or the count is odd. A table lookup per digit: branchy
    /// decoders were a tenth of plan's and send's CPU.
    @inlinable
    public static func decodePairs(_ text: UnsafeBufferPointer<UInt8>, into out: UnsafeMutablePointer<UInt8>) -> Bool {
        guard text.count % 2 == 0, let p = text.baseAddress else { return text.isEmpty }
        return digitValues.withUnsafeBufferPointer { table in
            var bad: UInt8 = 0
            for k in 0..<(text.count / 2) {
                let h = table[Int(p[2 * k])], l = table[Int(p[2 * k + 1])]
                bad |= h | l
                out[k] = h << 4 | l
            }
            return bad & 0xF0 == 0
        }
    }

    /// Appends two lower-case hex digits per byte.
    @inlinable
    public static func append(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: bytes.count * 2) { scratch in
            write(bytes, to: scratch.baseAddress!)
            out.append(contentsOf: UnsafeBufferPointer(scratch))
        }
    }

    /// Both hex digits of every byte value, as they lie in memory: one load
    /// and one store per byte.
    @usableFromInline
    static let digitPairs: [UInt16] = (0..<256).map { b in
        UInt16(digits[b >> 4]) | UInt16(digits[b & 0x0f]) << 8
    }

    /// Writes two lower-case hex digits per byte at `out` (room for `bytes.count * 2`).
    @inlinable
    public static func write(_ bytes: UnsafeBufferPointer<UInt8>, to out: UnsafeMutablePointer<UInt8>) {
        let raw = UnsafeMutableRawPointer(out)
        digitPairs.withUnsafeBufferPointer { pairs in
            for k in 0..<bytes.count {
                raw.storeBytes(of: pairs[Int(bytes[k])].littleEndian, toByteOffset: 2 * k, as: UInt16.self)
            }
        }
    }

    static func byteHex(_ b: UInt8) -> String {
        String(decoding: [digits[Int(b >> 4)], digits[Int(b & 0x0f)]], as: UTF8.self)
    }
}
