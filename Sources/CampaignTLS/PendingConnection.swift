#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// A connection being opened on a thread of its own.
public final class PendingConnection: @unchecked Sendable {
    private var result: Result<TLSConnection, TLSError>? = nil
    private var thread = pthread_t()
    private var joined = false

    /// - Parameter timeout: the limit of the connect, the proxy's tunnel and the handshake together.
    public init(host: String, port: Int, context: TLSContext, timeout: Double, cancellation: CancellationPipe, proxy: HTTPProxy? = nil) {
        thread = startThread { [self] in
            do throws(TLSError) {
                result = .success(try TLSConnection.connect(host: host, port: port, context: context, timeout: timeout,
                                                            cancellation: cancellation, proxy: proxy))
            } catch {
                result = .failure(error)
            }
        }
    }

    /// Waits for the attempt to end (the join orders its result before this read).
    public func wait() -> Result<TLSConnection, TLSError> {
        if !joined { pthread_join(thread, nil); joined = true }
        return result!
    }
}
