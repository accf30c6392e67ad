/// Passes a source through while keeping a gzip copy of everything read, so
/// a plan that came from standard input can be read again on resume. Each
/// chunk is sync-flushed and handed to the kernel before it is passed on, so
/// the copy holds at least what the reader has seen even if the process is
/// killed; it is fsynced at the end. (After a power loss mid-send, a resume
/// may find the copy shorter than what was read: it then reports the plan as
/// incomplete rather than guessing.)
public final class SpoolingSource: ByteSource {
    public var name: String { source.name }
    private let source: ByteSource
    private let spool: BufferedFileWriter
    private let compressor = GzipCompressor(level: 3)
    private var chunk = [UInt8](repeating: 0, count: 1 << 16)
    private var ended = false

    public init(source: ByteSource, spoolPath: String) throws(IOError) {
        self.source = source
        spool = try BufferedFileWriter(path: spoolPath, mode: SecureFile.privateMode)
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        let n = try source.read(into: buffer)
        if n > 0 {
            spool.buffer += compressor.compress(Array(UnsafeRawBufferPointer(rebasing: buffer[0..<n])), sync: true)
            try spool.flush()
        } else if !ended {
            ended = true
            spool.buffer += compressor.compress([], finish: true)
            try spool.sync()
        }
        return n
    }
}
