#if canImport(Glibc)
import Glibc
#endif
import Foundation
import CampaignIO
import CampaignTLS

/// An HTTP/2 server that misbehaves on purpose, on 127.0.0.1, port 0: TLS
/// with ALPN h2 and the development server certificate, then frames written
/// by hand (nghttp2's server would refuse to send most of them). Each
/// accepted connection gets `behaviour`; it counts connections and complete
/// requests, and stops with ``stop()`` (every wait watches it).
public final class HostileHTTP2Server: @unchecked Sendable {
    public enum Behaviour: String, CaseIterable, Sendable {
        // Answers that are the server's trouble, not the notification's.
        case internalErrorAlways, throttledForever, tokenUpdatesForever, refusedStreamForever
        // 429 with a retry-after that would mean "at once" (0, or a negative number).
        case throttledRetryAfterZero, throttledRetryAfterNegative
        case resetCancel, resetInternalError, resetProtocolError, redirectStatus, status999
        case notFoundEverything, badRequestNotJSON
        // Words to bound and check.
        case okWithTrailers, escapeReasonSometimes, longReasonSometimes, futureUnregistered
        // Waits without end.
        case neverGrowsWindow, holdsStreams, informationalThenNothing, hugeBody, hugeHeaderBlock, dripsAnswer, noStreamsAllowed
        // A stream limit that drops to 0 after ``okBeforeNoStreams`` answers (over all connections)
        // and never rises again: on later connections once a request comes (mid-send), or in their first SETTINGS.
        case noStreamsMidSend, noStreamsOnReconnect
        // Connections that never get anything done.
        case goAwayZero, pingFlood, settingsFlood, continuationFlood, pushPromise, dataOnUnopenedStream, windowUpdateOverflow
        case closeAfterHandshake, closeAfterSettings, acceptThenReset, neverSpeaksTLS
    }

    public let behaviour: Behaviour
    private let listener: Listener
    private let cancellation: CancellationPipe
    private let context: TLSContext
    private let lock = NSLock()
    private var _connections = 0
    private var _requests = 0
    private var _answeredBeforeNoStreams = 0
    private var accepter: Thread?
    private let accepterDone = DispatchSemaphore(value: 0)
    private let handlers = DispatchGroup()

    public init(_ behaviour: Behaviour) throws {
        self.behaviour = behaviour
        listener = try Listener(host: "127.0.0.1", port: 0)
        cancellation = try CancellationPipe()
        let identity = try TLSIdentity.pem(certificate: TestCertificates.path("server.pem"), key: TestCertificates.path("server.key"), passphrase: nil)
        context = try TLSContext.server(identity: identity, clientAuthorities: TestCertificates.path("ca.pem"), http2: true,
                                        requireClientCertificate: false)
        let thread = Thread { [self] in
            while let socket = try? listener.accept(cancellation: cancellation) {
                lock.lock(); _connections += 1; lock.unlock()
                handlers.enter()
                Thread.detachNewThread { [self] in
                    serve(socket)
                    handlers.leave()
                }
            }
            accepterDone.signal()
        }
        accepter = thread
        thread.start()
    }

    public var port: Int { listener.port }
    public var connections: Int { lock.lock(); defer { lock.unlock() }; return _connections }
    /// Requests received whole (their last frame carried END_STREAM).
    public var requests: Int { lock.lock(); defer { lock.unlock() }; return _requests }

    /// ``Behaviour/noStreamsMidSend`` and ``Behaviour/noStreamsOnReconnect``:
    /// how many requests are answered 200 before the stream limit drops to 0.
    public static let okBeforeNoStreams = 5

    /// Stops accepting and ends every connection (within a few seconds).
    public func stop() {
        cancellation.cancel()
        _ = accepterDone.wait(timeout: .now() + 10)
        _ = handlers.wait(timeout: .now() + 10)
        listener.close()
    }

    deinit { cancellation.cancel() }

    // MARK: - One connection

    private func serve(_ socket: Socket) {
        if behaviour == .neverSpeaksTLS {
            // Holds the TCP connection and says nothing.
            _ = sleep(until: .after(seconds: 3600), cancellation: cancellation)
            socket.abort()
            return
        }
        guard let tls = try? TLSConnection.accept(socket: socket, context: context, timeout: 10, cancellation: cancellation) else {
            socket.close()
            return
        }
        defer { tls.abort() }
        if behaviour == .closeAfterHandshake { return }
        var settings: [(UInt16, UInt32)] = [(3, 1000)]
        if behaviour == .neverGrowsWindow { settings = [(4, 0)] }
        if behaviour == .noStreamsAllowed { settings = [(3, 0)] }
        // Whether this connection has told the client it allows no stream.
        var saidNoStreams = false
        if behaviour == .noStreamsOnReconnect, answeredBeforeNoStreams >= Self.okBeforeNoStreams {
            settings = [(3, 0)]
            saidNoStreams = true
        }
        guard write(tls, Frame.settings(settings)) else { return }
        switch behaviour {
        case .closeAfterSettings: return
        case .goAwayZero:
            _ = write(tls, Frame(type: 7, flags: 0, stream: 0, payload: be32(0) + be32(0)))
        case .pingFlood, .settingsFlood, .windowUpdateOverflow, .dataOnUnopenedStream:
            flood(tls)
            return
        default: break
        }
        var reader = FrameReader()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var answered = 0
        let deadline = Deadline.after(seconds: 300)
        while !cancellation.isCancelled {
            let n: Int
            do { n = try tls.read(into: &buffer, cancellation: cancellation, deadline: deadline) } catch { return }
            if n == 0 { return }
            reader.feed(buffer[0..<n])
            while let frame = reader.next() {
                if frame.stream == 0 && frame.type == 0 { continue }
                switch frame.type {
                case 4 where frame.flags & 1 == 0:   // SETTINGS: acknowledged
                    guard write(tls, Frame(type: 4, flags: 1, stream: 0, payload: [])) else { return }
                case 6 where frame.flags & 1 == 0:   // PING: answered, whatever else the server does
                    guard write(tls, Frame(type: 6, flags: 1, stream: 0, payload: frame.payload)) else { return }
                case 7:   // GOAWAY from the client
                    return
                case 0, 1:   // DATA or HEADERS
                    if frame.type == 0 && behaviour != .neverGrowsWindow && !frame.payload.isEmpty {
                        // The connection's window, so requests keep coming.
                        guard write(tls, Frame(type: 8, flags: 0, stream: 0, payload: be32(UInt32(frame.payload.count)))) else { return }
                    }
                    if frame.flags & 1 != 0 {   // END_STREAM: a whole request
                        lock.lock(); _requests += 1; let total = _requests; lock.unlock()
                        answered += 1
                        if behaviour == .noStreamsMidSend || behaviour == .noStreamsOnReconnect {
                            guard limitStreams(tls, stream: frame.stream, saidNoStreams: &saidNoStreams) else { return }
                            continue
                        }
                        guard respond(tls, stream: frame.stream, nth: total, onConnection: answered) else { return }
                    }
                default: break
                }
            }
        }
    }

    private var answeredBeforeNoStreams: Int { lock.lock(); defer { lock.unlock() }; return _answeredBeforeNoStreams }

    /// The first ``okBeforeNoStreams`` requests are answered 200; with the
    /// last of them (in the same write, so the client reads both together)
    /// the connection's stream limit drops to 0. After that, a connection
    /// that has not said so yet says it before anything else, and every
    /// request is refused (REFUSED_STREAM: above the limit, RFC 9113 §5.1.2).
    /// False ends the connection.
    private func limitStreams(_ tls: TLSConnection, stream: UInt32, saidNoStreams: inout Bool) -> Bool {
        lock.lock()
        let nth = _answeredBeforeNoStreams < Self.okBeforeNoStreams ? _answeredBeforeNoStreams + 1 : nil
        if let nth { _answeredBeforeNoStreams = nth }
        lock.unlock()
        var bytes: [UInt8] = []
        if let nth {
            bytes = Frame.headers(stream: stream, status: "200", extra: [], endStream: true).bytes
            if nth == Self.okBeforeNoStreams { bytes += Frame.settings([(3, 0)]).bytes; saidNoStreams = true }
        } else {
            if !saidNoStreams { bytes = Frame.settings([(3, 0)]).bytes; saidNoStreams = true }
            bytes += Frame(type: 3, flags: 0, stream: stream, payload: be32(7)).bytes
        }
        return write(tls, bytes)
    }

    /// Answers (or not) the request on `stream`; false ends the connection.
    private func respond(_ tls: TLSConnection, stream: UInt32, nth: Int, onConnection: Int) -> Bool {
        func answer(_ status: String, _ body: String = "", _ extra: [(String, String)] = []) -> Bool {
            var frames = [Frame.headers(stream: stream, status: status, extra: extra, endStream: body.isEmpty)]
            if !body.isEmpty { frames.append(Frame(type: 0, flags: 1, stream: stream, payload: Array(body.utf8))) }
            return write(tls, frames.flatMap(\.bytes))
        }
        func reset(_ code: UInt32) -> Bool { write(tls, Frame(type: 3, flags: 0, stream: stream, payload: be32(code))) }
        switch behaviour {
        case .internalErrorAlways: return answer("500", #"{"reason":"InternalServerError"}"#)
        case .throttledForever: return answer("429", #"{"reason":"TooManyRequests"}"#, [("retry-after", "1000000000000")])
        case .tokenUpdatesForever: return answer("429", #"{"reason":"TooManyProviderTokenUpdates"}"#)
        case .throttledRetryAfterZero: return answer("429", #"{"reason":"TooManyRequests"}"#, [("retry-after", "0")])
        case .throttledRetryAfterNegative: return answer("429", #"{"reason":"TooManyRequests"}"#, [("retry-after", "-5")])
        case .refusedStreamForever: return reset(7)
        case .resetCancel: return reset(8)
        case .resetInternalError: return reset(2)
        case .resetProtocolError: return reset(1)
        case .redirectStatus: return answer("301", "", [("location", "https://example.invalid/")])
        case .status999: return answer("999")
        case .notFoundEverything: return answer("404", "Not Found")
        case .badRequestNotJSON: return answer("400", "<html><body>Bad Request</body></html>")
        case .okWithTrailers:
            let head = Frame.headers(stream: stream, status: "200", extra: [("apns-id", "6E8B1A2C-0000-0000-0000-000000000000")], endStream: false)
            let trailers = Frame(type: 1, flags: 0x5, stream: stream, payload: HPACK.literal("x-trailer", "done"))
            return write(tls, head.bytes + trailers.bytes)
        case .escapeReasonSometimes:
            return nth % 5 == 0 ? answer("400", "{\"reason\":\"\\u001b[31mRED\\u0007\"}") : answer("200")
        case .longReasonSometimes:
            return nth % 5 == 0 ? answer("400", #"{"reason":""# + String(repeating: "A", count: 10_000) + #""}"#) : answer("200")
        case .futureUnregistered: return answer("410", #"{"reason":"Unregistered","timestamp":4294967295000}"#)
        case .neverGrowsWindow, .holdsStreams, .noStreamsAllowed, .goAwayZero: return true
        case .noStreamsMidSend, .noStreamsOnReconnect: return true   // answered by limitStreams
        case .informationalThenNothing:
            return write(tls, Frame.headers(stream: stream, status: "103", extra: [("link", "</a>; rel=preload")], endStream: false).bytes)
        case .hugeBody:
            var bytes = Frame.headers(stream: stream, status: "400", extra: [], endStream: false).bytes
            let chunk = [UInt8](repeating: UInt8(ascii: " "), count: 16_384)
            for i in 0..<64 { bytes += Frame(type: 0, flags: i == 63 ? 1 : 0, stream: stream, payload: chunk).bytes }
            return write(tls, bytes)
        case .hugeHeaderBlock:
            var block = HPACK.status("200")
            for i in 0..<50 { block += HPACK.literal("x-big-\(i)", String(repeating: "b", count: 4000)) }
            return write(tls, Frame.headerBlock(stream: stream, block: block, endStream: true))
        case .dripsAnswer:
            let bytes = Frame.headers(stream: stream, status: "200", extra: [("x-pad", String(repeating: "p", count: 64))], endStream: true).bytes
            for b in bytes {
                guard write(tls, [b]) else { return false }
                if !sleep(until: .after(seconds: 1), cancellation: cancellation) { return false }
            }
            return true
        case .continuationFlood:
            guard write(tls, Frame(type: 1, flags: 0x1, stream: stream, payload: HPACK.status("200"))) else { return false }
            let piece = Frame(type: 9, flags: 0, stream: stream, payload: HPACK.literal("x-flood", String(repeating: "c", count: 1000))).bytes
            for _ in 0..<100_000 { guard write(tls, piece) else { return false } }
            return false
        case .pushPromise:
            let promise = Frame(type: 5, flags: 0x4, stream: stream, payload: be32(2) + HPACK.literal(":method", "GET"))
            return write(tls, promise.bytes) && answer("200")
        case .acceptThenReset: return false
        case .pingFlood, .settingsFlood, .windowUpdateOverflow, .dataOnUnopenedStream,
             .closeAfterHandshake, .closeAfterSettings, .neverSpeaksTLS:
            return false
        }
    }

    /// Writes frames without reading until the client gives up, for at most 60 s.
    private func flood(_ tls: TLSConnection) {
        let frame: [UInt8]
        switch behaviour {
        case .pingFlood: frame = Frame(type: 6, flags: 0, stream: 0, payload: [UInt8](repeating: 7, count: 8)).bytes
        case .settingsFlood: frame = Frame.settings([(3, 1000)]).bytes
        case .windowUpdateOverflow: frame = Frame(type: 8, flags: 0, stream: 0, payload: be32(0x7FFF_FFFF)).bytes
        default: frame = Frame(type: 0, flags: 0, stream: 2, payload: Array("unopened".utf8)).bytes
        }
        let batch = Array([[UInt8]](repeating: frame, count: 64).joined())
        let deadline = Deadline.after(seconds: 60)
        while !cancellation.isCancelled, Deadline.now() < deadline {
            guard (try? tls.write(batch, cancellation: cancellation, deadline: deadline)) != nil else { return }
        }
    }

    private func write(_ tls: TLSConnection, _ frame: Frame) -> Bool { write(tls, frame.bytes) }

    private func write(_ tls: TLSConnection, _ bytes: [UInt8]) -> Bool {
        (try? tls.write(bytes, cancellation: cancellation, deadline: .after(seconds: 10))) != nil
    }
}

private func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }

/// One HTTP/2 frame (RFC 9113 §4.1), written by hand.
public struct Frame {
    public var type: UInt8
    public var flags: UInt8
    public var stream: UInt32
    public var payload: [UInt8]

    public init(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8]) {
        (self.type, self.flags, self.stream, self.payload) = (type, flags, stream, payload)
    }

    public var bytes: [UInt8] {
        let n = payload.count
        return [UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF), type, flags] + be32(stream & 0x7FFF_FFFF) + payload
    }

    public static func settings(_ entries: [(UInt16, UInt32)]) -> Frame {
        Frame(type: 4, flags: 0, stream: 0, payload: entries.flatMap { [UInt8($0.0 >> 8), UInt8($0.0 & 0xFF)] + be32($0.1) })
    }

    /// A response's HEADERS (END_HEADERS; END_STREAM when `endStream`).
    public static func headers(stream: UInt32, status: String, extra: [(String, String)], endStream: Bool) -> Frame {
        var block = HPACK.status(status)
        for (name, value) in extra { block += HPACK.literal(name, value) }
        return Frame(type: 1, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, payload: block)
    }

    /// A header block of any size: HEADERS, then CONTINUATION frames of at most 16 KB.
    public static func headerBlock(stream: UInt32, block: [UInt8], endStream: Bool) -> [UInt8] {
        var out: [UInt8] = []
        var offset = 0
        repeat {
            let end = min(block.count, offset + 16_384)
            let last = end == block.count
            let type: UInt8 = offset == 0 ? 1 : 9
            var flags: UInt8 = last ? 0x4 : 0
            if offset == 0 && endStream { flags |= 0x1 }
            out += Frame(type: type, flags: flags, stream: stream, payload: Array(block[offset..<end])).bytes
            offset = end
        } while offset < block.count
        return out
    }
}

/// Enough HPACK (RFC 7541) to write answers: literals without indexing, no Huffman.
public enum HPACK {
    static func integer(_ value: Int, prefixBits: Int, first: UInt8) -> [UInt8] {
        let max = (1 << prefixBits) - 1
        if value < max { return [first | UInt8(value)] }
        var out = [first | UInt8(max)]
        var rest = value - max
        while rest >= 128 { out.append(UInt8(rest % 128 + 128)); rest /= 128 }
        out.append(UInt8(rest))
        return out
    }

    static func string(_ s: String) -> [UInt8] { integer(s.utf8.count, prefixBits: 7, first: 0) + Array(s.utf8) }

    /// `:status` by the static table's name (index 8).
    public static func status(_ value: String) -> [UInt8] { integer(8, prefixBits: 4, first: 0) + string(value) }

    public static func literal(_ name: String, _ value: String) -> [UInt8] { [0] + string(name) + string(value) }
}

/// Splits what a client sends into frames, after its 24-byte preface.
struct FrameReader {
    private var bytes: [UInt8] = []
    private var prefaceSkipped = false

    mutating func feed(_ more: ArraySlice<UInt8>) { bytes += more }

    mutating func next() -> Frame? {
        if !prefaceSkipped {
            guard bytes.count >= 24 else { return nil }
            bytes.removeFirst(24)
            prefaceSkipped = true
        }
        guard bytes.count >= 9 else { return nil }
        let n = Int(bytes[0]) << 16 | Int(bytes[1]) << 8 | Int(bytes[2])
        guard bytes.count >= 9 + n else { return nil }
        let stream = (UInt32(bytes[5]) << 24 | UInt32(bytes[6]) << 16 | UInt32(bytes[7]) << 8 | UInt32(bytes[8])) & 0x7FFF_FFFF
        let frame = Frame(type: bytes[3], flags: bytes[4], stream: stream, payload: Array(bytes[9..<(9 + n)]))
        bytes.removeFirst(9 + n)
        return frame
    }
}
