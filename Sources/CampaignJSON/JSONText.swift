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
        forEachEscapeRun(buffer, run: { out.append(contentsOf: $0) }, escape: { appendEscape(of: $0, to: &out) })
    }

    @inlinable
    public static func appendEscape(of b: UInt8, to out: inout [UInt8]) {
        withEscape(of: b) { out.append(contentsOf: $0) }
    }

    /// The escape sequence of a byte that needs one (a quote, a backslash, a
    /// control character), for `body` to copy.
    @inlinable
    public static func withEscape<R>(of b: UInt8, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        var sequence: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0x5C, b, 0, 0, 0, 0)
        var count = 2
        switch b {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): break
        case 0x0A: sequence.1 = UInt8(ascii: "n")
        case 0x0D: sequence.1 = UInt8(ascii: "r")
        case 0x09: sequence.1 = UInt8(ascii: "t")
        case 0x08: sequence.1 = UInt8(ascii: "b")
        case 0x0C: sequence.1 = UInt8(ascii: "f")
        default:
            sequence = (0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hexDigits[Int(b >> 4)], hexDigits[Int(b & 0x0f)])
            count = 6
        }
        return withUnsafeBytes(of: &sequence) { body(UnsafeBufferPointer(start: $0.baseAddress!.assumingMemoryBound(to: UInt8.self), count: count)) }
    }

    /// Calls `run` with each stretch of `buffer` that needs no escape and
    /// `escape` with each byte between them that does: one copy per stretch.
    @inlinable @inline(__always)
    public static func forEachEscapeRun(_ buffer: UnsafeBufferPointer<UInt8>, run: (UnsafeBufferPointer<UInt8>) -> Void, escape: (UInt8) -> Void) {
        var runStart = 0
        var i = 0
        while i < buffer.count {
            let b = buffer[i]
            if b >= 0x20 && b != UInt8(ascii: "\"") && b != UInt8(ascii: "\\") && b != 0x7F {
                i += 1
                continue
            }
            if i > runStart { run(UnsafeBufferPointer(rebasing: buffer[runStart..<i])) }
            escape(b)
            i += 1
            runStart = i
        }
        if i > runStart { run(UnsafeBufferPointer(rebasing: buffer[runStart..<i])) }
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
        // Digits written from the end of a stack buffer, then appended in one
        // copy: a byte-by-byte append was 4% of plan's CPU (a seq per record).
        withUnsafeMutableBytes(of: &digits) { d in
            var start = d.count
            while v > 0 {
                start -= 1
                d[start] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
            }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: d[start...]))
        }
    }
}
