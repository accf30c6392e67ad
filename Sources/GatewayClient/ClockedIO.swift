#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignTLS

/// Reads and writes of a connection outside the engine's loop (the channel
/// management client's) whose waits pass on a ``SendClock``, as the
/// engine's do: a deadline is the clock's nanoseconds, and a test's clock
/// moves through an answer timeout of 30 s at once. Every wait watches
/// `cancellation` (nil: none) and ends at its deadline.
extension TLSConnection {
    /// Reads at least one byte into the start of `buffer`; 0 when the peer closed.
    /// Throws `.cancelled` when `cancellation` rang, `.timedOut` at `deadline`.
    package func read(into buffer: inout [UInt8], cancellation: CancellationPipe?, until deadline: UInt64,
                      on clock: SendClock) throws(TLSError) -> Int {
        var failure: TLSError?
        var count = 0
        buffer.withUnsafeMutableBytes { raw in
            do throws(TLSError) {
                while true {
                    let result = try tryRead(into: raw)
                    switch result {
                    case .bytes(let n): count = n; return
                    case .closed: count = 0; return
                    case .wantRead, .wantWrite:
                        try wait(for: result, cancellation: cancellation, until: deadline, on: clock, "reading from \(peerName)")
                    }
                }
            } catch { failure = error }
        }
        if let failure { throw failure }
        return count
    }

    /// Writes all of `bytes`, with the same waits as ``read(into:cancellation:until:on:)``.
    package func write(_ bytes: [UInt8], cancellation: CancellationPipe?, until deadline: UInt64,
                       on clock: SendClock) throws(TLSError) {
        var failure: TLSError?
        bytes.withUnsafeBytes { raw in
            do throws(TLSError) {
                var offset = 0
                while offset < raw.count {
                    let result = try tryWrite(UnsafeRawBufferPointer(rebasing: raw[offset...]))
                    switch result {
                    case .bytes(let n): offset += n
                    case .closed: throw TLSError(.connectionReset(reason: "\(peerName) closed the connection"))
                    case .wantRead, .wantWrite:
                        try wait(for: result, cancellation: cancellation, until: deadline, on: clock, "writing to \(peerName)")
                    }
                }
            } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Waits on `clock` until the socket can do what `result` asked, at most
    /// a second a poll (the clock is read again after each).
    private func wait(for result: IOResult, cancellation: CancellationPipe?, until deadline: UInt64, on clock: SendClock,
                      _ operation: @autoclosure () -> String) throws(TLSError) {
        var fds = [pollfd(fd: socket.fd, events: Int16(result == .wantWrite ? POLLOUT : POLLIN), revents: 0),
                   pollfd(fd: cancellation?.pollDescriptor ?? -1, events: Int16(POLLIN), revents: 0)]
        while true {
            if cancellation?.isCancelled == true { throw TLSError(.cancelled) }
            let t = clock.now
            guard t < deadline else { throw TLSError(.timedOut(operation: operation())) }
            (fds[0].revents, fds[1].revents) = (0, 0)
            clock.poll(&fds, count: 2, milliseconds: Int32(min(1_000, (deadline - t + 999_999) / 1_000_000)))
            if fds[1].revents != 0 { throw TLSError(.cancelled) }
            if fds[0].revents != 0 { return }
        }
    }
}
