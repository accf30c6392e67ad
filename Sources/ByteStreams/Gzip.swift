internal import CZlib
internal import CIOShims
import CampaignIO

/// Decompresses a gzip stream (several concatenated members allowed, as
/// `cat a.gz b.gz` makes) from another source.
public final class GzipSource: ByteSource {
    public var name: String { source.name }
    private let source: ByteSource
    /// zlib keeps a pointer back to its stream and checks it on every call:
    /// the stream lives in memory of its own, never moved, like the CSV parser.
    private let stream: UnsafeMutablePointer<z_stream> = {
        let p = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        p.initialize(to: z_stream())
        return p
    }()
    private var input = [UInt8](repeating: 0, count: 65_536)
    private var inputCount = 0
    private var inputOffset = 0
    private var consumedTotal = 0
    private var finished = false
    private var sawData = false
    private let toleratesTruncation: Bool

    /// With `toleratesTruncation`, a stream cut short ends quietly where its
    /// data ends: for spools written with sync flushes by a process that died.
    public init(compressed source: ByteSource, toleratesTruncation: Bool = false) throws(IOError) {
        self.source = source
        self.toleratesTruncation = toleratesTruncation
        // 15 + 16: a gzip wrapper only, with the largest window.
        guard campaign_inflate_init2(stream, 15 + 16) == Z_OK else {
            throw IOError(path: source.name, reason: "cannot start gzip decompression")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        guard buffer.count > 0 else { return 0 }
        while !finished {
            if inputOffset == inputCount {
                let n = try source.read(into: &input)
                if n == 0 {
                    if sawData && !toleratesTruncation { throw IOError(path: name, reason: "ends in the middle of its gzip data (truncated?)") }
                    finished = true
                    return 0
                }
                inputCount = n
                inputOffset = 0
            }
            let produced: Int
            let rc: Int32
            (produced, rc) = input.withUnsafeMutableBytes { raw -> (Int, Int32) in
                stream.pointee.next_in = raw.baseAddress!.assumingMemoryBound(to: Bytef.self) + inputOffset
                stream.pointee.avail_in = uInt(inputCount - inputOffset)
                stream.pointee.next_out = buffer.baseAddress!.assumingMemoryBound(to: Bytef.self)
                stream.pointee.avail_out = uInt(buffer.count)
                let rc = inflate(stream, Z_NO_FLUSH)
                let used = (inputCount - inputOffset) - Int(stream.pointee.avail_in)
                inputOffset += used
                consumedTotal += used
                return (buffer.count - Int(stream.pointee.avail_out), rc)
            }
            sawData = true
            switch rc {
            case Z_OK, Z_BUF_ERROR:
                break
            case Z_STREAM_END:
                // Another member may follow; reset and go on, or end cleanly.
                sawData = false
                inflateReset(stream)
            default:
                let message = stream.pointee.msg.map { String(cString: $0) } ?? "code \(rc)"
                throw IOError(path: name, reason: "is not valid gzip data near compressed byte \(consumedTotal): \(message)")
            }
            if produced > 0 { return produced }
        }
        return 0
    }
}

/// Compresses into gzip, for spooled plans.
public final class GzipCompressor {
    /// zlib keeps a pointer back to its stream and checks it on every call:
    /// the stream lives in memory of its own, never moved, like the CSV parser.
    private let stream: UnsafeMutablePointer<z_stream> = {
        let p = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        p.initialize(to: z_stream())
        return p
    }()
    private var scratch = [UInt8](repeating: 0, count: 65_536)

    public init(level: Int32 = 6) {
        _ = campaign_deflate_init2(stream, level, 15 + 16)
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Compresses `bytes`; with `sync`, everything so far becomes decodable
    /// (a crash after it loses nothing written before it); with `finish`, ends
    /// the gzip member. Returns what is ready to write.
    public func compress(_ bytes: [UInt8], sync: Bool = false, finish: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        var bytes = bytes
        bytes.withUnsafeMutableBytes { raw in
            stream.pointee.next_in = raw.baseAddress?.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_in = uInt(raw.count)
            repeat {
                scratch.withUnsafeMutableBytes { s in
                    stream.pointee.next_out = s.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    stream.pointee.avail_out = uInt(s.count)
                    _ = deflate(stream, finish ? Z_FINISH : (sync ? Z_SYNC_FLUSH : Z_NO_FLUSH))
                    out.append(contentsOf: UnsafeRawBufferPointer(rebasing: s[0..<(s.count - Int(stream.pointee.avail_out))]))
                }
            } while stream.pointee.avail_out == 0 || stream.pointee.avail_in > 0
        }
        return out
    }
}

/// CRC-32 (as zlib and gzip compute it).
public struct CRC32: Sendable, Equatable {
    public private(set) var value: UInt32 = 0

    public init() {}

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        value = campaign_crc32(value, base.assumingMemoryBound(to: UInt8.self), bytes.count)
    }

    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    public mutating func update(_ bytes: ArraySlice<UInt8>) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Eight lower-case hex digits.
    public var hex: String {
        let s = String(value, radix: 16)
        return String(repeating: "0", count: 8 - s.count) + s
    }
}
