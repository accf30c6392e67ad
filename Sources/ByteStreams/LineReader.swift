#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// Splits a byte source into lines at LF, keeping each line's terminator, and
/// numbering them from 1. A line longer than the limit is skipped and reported
/// rather than buffered, so memory stays bounded whatever the input.
public final class LineReader {
    public enum Line {
        /// A complete line (the last one may lack its LF).
        case text(number: Int)
        /// A line over the limit, skipped; `byteCount` is its length.
        case overlong(number: Int, byteCount: Int)
    }

    public let maxLineBytes: Int
    private let source: ByteSource
    /// Allocated once and never moved. An Array here was retained and
    /// released around every line's use (callgrind: a pair per row, on the
    /// reading thread that bounds `plan`).
    private let buffer: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0
    private var lineNumber = 0
    private var atEnd = false
    /// Called before every read from the source (which may block, on a pipe):
    /// a consumer that holds work back for batching hands it on here, so
    /// nothing waits behind a slow upstream.
    public var beforeRead: (() -> Void)? = nil
    /// Bounds of the line `next()` returned last.
    public private(set) var current: Range<Int> = 0..<0

    public init(source: ByteSource, maxLineBytes: Int = 1 << 20) {
        self.source = source
        self.maxLineBytes = maxLineBytes
        buffer = .allocate(byteCount: max(1 << 18, maxLineBytes + 1), alignment: 64)
    }

    deinit { buffer.deallocate() }

    public var sourceName: String { source.name }

    /// CRC-32 of the lines passed to ``checksumCurrentLine()``, in order.
    /// Adjacent lines are checksummed as one run when the buffer is refilled
    /// or the run breaks: zlib is several times faster on long runs than
    /// line by line. Read it after ``flushChecksum()``.
    public private(set) var checksum = CRC32()
    private var runStart = -1
    private var runEnd = -1

    /// Adds the current line to the checksum.
    @inline(__always)
    public func checksumCurrentLine() {
        if runStart >= 0, runEnd == current.lowerBound {
            runEnd = current.upperBound
        } else {
            flushChecksum()
            runStart = current.lowerBound
            runEnd = current.upperBound
        }
    }

    /// Brings ``checksum`` up to date with every line added so far.
    public func flushChecksum() {
        guard runStart >= 0 else { return }
        checksum.update(UnsafeRawBufferPointer(rebasing: buffer[runStart..<runEnd]))
        runStart = -1
        runEnd = -1
    }

    /// Runs `body` on the bytes of the line `next()` returned last.
    @inline(__always)
    public func withCurrentLine<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(rebasing: buffer[current]))
    }

    /// The next line, or nil at the end of the input.
    public func next() throws(IOError) -> Line? {
        while true {
            if let lf = findLF(from: start) {
                lineNumber += 1
                current = start..<(lf + 1)
                start = lf + 1
                return .text(number: lineNumber)
            }
            if atEnd {
                guard start < end else { return nil }
                lineNumber += 1
                current = start..<end
                start = end
                return .text(number: lineNumber)
            }
            if end - start > maxLineBytes {
                return try skipOverlong()
            }
            try refill()
        }
    }

    private func findLF(from index: Int) -> Int? {
        guard index < end else { return nil }
        guard let hit = memchr(buffer.baseAddress! + index, 0x0A, end - index) else { return nil }
        return UnsafeRawPointer(buffer.baseAddress!).distance(to: UnsafeRawPointer(hit))
    }

    private func refill() throws(IOError) {
        flushChecksum()   // the bytes are about to move
        if start > 0 {
            buffer.baseAddress!.copyMemory(from: buffer.baseAddress! + start, byteCount: end - start)
            end -= start
            start = 0
        }
        beforeRead?()
        let n = try source.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[end...]))
        if n == 0 { atEnd = true }
        end += n
    }

    private func skipOverlong() throws(IOError) -> Line {
        flushChecksum()
        lineNumber += 1
        let number = lineNumber
        var count = 0
        while true {
            if let lf = findLF(from: start) {
                count += lf + 1 - start
                start = lf + 1
                return .overlong(number: number, byteCount: count)
            }
            count += end - start
            start = 0
            end = 0
            beforeRead?()
            let n = try source.read(into: buffer)
            if n == 0 {
                atEnd = true
                return .overlong(number: number, byteCount: count)
            }
            end = n
        }
    }
}
