#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignTLS

/// Distance on one machine: a TCP relay in front of the simulator that holds
/// every byte it receives, in each direction, for a fixed one-way delay
/// before passing it on (`simulator --latency-ms N`, a round trip of 2N ms,
/// where netem is not available).
///
/// It reads at once whatever arrives, so the sender's socket never fills:
/// what limits a connection is HTTP/2 flow control, whose WINDOW_UPDATEs
/// reach the sender a round trip after the data they release, as from
/// Apple. Each direction keeps at most ``maxHeldBytes`` in flight (a link's
/// bandwidth-delay product, generously); past that it stops reading until
/// bytes are delivered. An end of stream (FIN) is delayed like data, and so
/// is a reset: as on a real path, the bytes a side sent before it reset
/// still arrive, then the reset (the relay resets the other side).
struct LatencyRelay {
    let delayNanoseconds: UInt64
    static let maxHeldBytes = 32 << 20

    /// One direction: bytes read from `from`, due for `to` at their time.
    private struct Lane {
        var chunks: [(due: UInt64, bytes: [UInt8])] = []
        var head = 0
        var offset = 0
        var held = 0
        /// When the reader's end of stream is due at the other side.
        var finAt: UInt64?
        /// The end was a reset (an error reading, or writing to, that side): the other side is reset, not closed.
        var resets = false
        var finDelivered = false

        var isEmpty: Bool { head == chunks.count }
        var nextDue: UInt64? { isEmpty ? finDelivered ? nil : finAt : chunks[head].due }
    }

    /// Relays between `client` and `server` until both ends closed, one
    /// failed, or `cancellation`; closes both.
    func run(client: Socket, server: Socket, cancellation: CancellationPipe) {
        var lanes = [Lane(), Lane()]   // 0: client → server, 1: server → client
        let sockets = [client, server]
        var buffer = [UInt8](repeating: 0, count: 65_536)
        defer { client.close(); server.close() }
        while !cancellation.isCancelled {
            let now = Deadline.now().nanoseconds
            var fds: [pollfd] = []
            var timeout: Int32 = 1000
            for side in 0..<2 {
                let inbound = lanes[side], outbound = lanes[1 - side]
                var events: Int16 = 0
                if inbound.finAt == nil, inbound.held < Self.maxHeldBytes { events |= Int16(POLLIN) }
                if let due = outbound.nextDue {
                    if due <= now { if !outbound.isEmpty { events |= Int16(POLLOUT) } else { timeout = 0 } }
                    else { timeout = min(timeout, Int32((due - now + 999_999) / 1_000_000)) }
                }
                // A socket with nothing to wait for is left out: its hang-up would wake every poll.
                fds.append(pollfd(fd: events == 0 ? -1 : sockets[side].fd, events: events, revents: 0))
            }
            fds.append(pollfd(fd: cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0))
            _ = poll(&fds, nfds_t(fds.count), timeout)
            let t = Deadline.now().nanoseconds
            for side in 0..<2 {
                let revents = fds[side].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, lanes[side].finAt == nil {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(sockets[side].fd, $0.baseAddress, $0.count) }
                    if n > 0 {
                        lanes[side].chunks.append((t + delayNanoseconds, Array(buffer[0..<n])))
                        lanes[side].held += n
                    } else if n == 0 {
                        lanes[side].finAt = t + delayNanoseconds
                    } else if errno != EAGAIN && errno != EINTR {
                        lanes[side].finAt = t + delayNanoseconds
                        lanes[side].resets = true
                    }
                }
                // Deliver what is due to the other side.
                let to = sockets[1 - side]
                while !lanes[side].isEmpty, lanes[side].chunks[lanes[side].head].due <= t {
                    let (chunk, offset) = (lanes[side].chunks[lanes[side].head].bytes, lanes[side].offset)
                    let n = chunk.withUnsafeBytes { Glibc.write(to.fd, $0.baseAddress! + offset, $0.count - offset) }
                    if n < 0 {
                        if errno == EAGAIN || errno == EINTR { break }
                        // The other side is gone: nothing more reaches it, and what it
                        // sent before is still delivered, then its reset.
                        lanes[side].head = lanes[side].chunks.count
                        lanes[side].held = 0
                        lanes[side].finDelivered = true
                        if lanes[1 - side].finAt == nil || !lanes[1 - side].resets {
                            lanes[1 - side].finAt = min(lanes[1 - side].finAt ?? .max, t + delayNanoseconds)
                            lanes[1 - side].resets = true
                        }
                        break
                    }
                    lanes[side].offset += n
                    if lanes[side].offset < chunk.count { break }
                    lanes[side].held -= chunk.count
                    lanes[side].offset = 0
                    lanes[side].head += 1
                    if lanes[side].head > 256, lanes[side].head * 2 > lanes[side].chunks.count {
                        lanes[side].chunks.removeFirst(lanes[side].head)
                        lanes[side].head = 0
                    }
                }
                if lanes[side].isEmpty, let fin = lanes[side].finAt, fin <= t, !lanes[side].finDelivered {
                    lanes[side].finDelivered = true
                    if lanes[side].resets {
                        client.abort(); server.abort()
                        return
                    }
                    to.shutdownWrite()
                }
            }
            if lanes[0].finDelivered && lanes[1].finDelivered { return }
        }
    }
}
