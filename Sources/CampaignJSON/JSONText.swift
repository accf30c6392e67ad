/// Byte-level JSON text building for hot paths: no Foundation, no String per
/// value.
public enum JSONText {
    @usableFromInline
    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `bytes` (UTF-8) as the inside of a JSON string: quotes,
    /// backslashes and control characters escaped, everything else, non-ASCII
    /// included, copied as it is.
    @inlinable
    public static func appendEscaped(_ bytes: some Collection<UInt8>, to out: inout [UInt8]) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { appendEscaped(buffer: $0, to: &out) }
        if done == nil {
            let copy = Array(bytes)
            copy.withUnsafeBufferPointer { appendEscaped(buffer: $0, to: &out) }
        }
    }

    /// Copies runs of bytes that need no escape in bulk; most payload text is one run.
    @inlinable
    public static func appendEscaped(buffer: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var runStart = 0
        var i = 0
        while i < buffer.count {
            let b = buffer[i]
            if b >= 0x20 && b != UInt8(ascii: "\"") && b != UInt8(ascii: "\\") && b != 0x7F {
                i += 1
                continue
            }
            if i > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart..<i])) }
            appendEscape(of: b, to: &out)
            i += 1
            runStart = i
        }
        if i > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart..<i])) }
    }

    @inlinable
    public static func appendEscape(of b: UInt8, to out: inout [UInt8]) {
        switch b {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(b)
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(b)
        case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "f"))
        default:
            out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            out.append(hexDigits[Int(b >> 4)])
            out.append(hexDigits[Int(b & 0x0f)])
        }
    }

    /// The number of bytes ``appendEscaped(_:to:)`` would append.
    @inlinable
    public static func escapedCount(_ bytes: some Collection<UInt8>) -> Int {
        var n = 0
        for b in bytes {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: n += 2
            case 0x00..<0x20, 0x7F: n += 6
            default: n += 1
            }
        }
        return n
    }

    /// Appends a quoted JSON string.
    @inlinable
    public static func appendString(_ bytes: some Collection<UInt8>, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        appendEscaped(bytes, to: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the decimal digits of `value`.
    @inlinable
    public static func appendDecimal(_ value: some BinaryInteger, to out: inout [UInt8]) {
        var v = Int64(value)
        if v < 0 {
            out.append(UInt8(ascii: "-"))
            if v == Int64.min { out.append(contentsOf: Array("9223372036854775808".utf8)); return }
            v = -v
        }
        if v < 10 { out.append(UInt8(ascii: "0") + UInt8(v)); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { d in
            while v > 0 {
                d[count] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
                count += 1
            }
            while count > 0 {
                count -= 1
                out.append(d[count])
            }
        }
    }
}
