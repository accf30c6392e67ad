import CampaignIO

/// Passes a source through while keeping a copy of everything read, so a
/// plan that came from standard input can be read again on resume. Each
/// chunk is handed to the kernel before it is passed on, so the copy holds
/// at least what the reader has seen even if the process is killed; it is
/// fsynced at the end. The copy is raw: compressing it (gzip, as the first
/// version did) cost more CPU than the whole rest of `plan | send`. (After a power loss mid-send, a resume
/// may find the copy shorter than what was read: it then reports the plan as
/// incomplete rather than guessing.)
public final class SpoolingSource: ByteSource {
    public var name: String { source.name }
    private let source: ByteSource
    private let spool: BufferedFileWriter
    private var ended = false

    public init(source: ByteSource, spoolPath: String) throws(IOError) {
        self.source = source
        spool = try BufferedFileWriter(path: spoolPath, mode: SecureFile.privateMode)
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        let n = try source.read(into: buffer)
        if n > 0 {
            try spool.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        } else if !ended {
            ended = true
            try spool.sync()
        }
        return n
    }
}
