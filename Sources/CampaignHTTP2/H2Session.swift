import CNGHTTP2

/// One HTTP/2 connection's protocol state, client or server, over bytes the
/// caller moves: ``receive(_:)`` takes what the peer sent, ``send(into:)``
/// gives what to write. nghttp2 does the framing, HPACK, flow control (a
/// WINDOW_UPDATE for what was read), SETTINGS and PING acknowledgements, and
/// stream limits (requests above the peer's MAX_CONCURRENT_STREAMS wait in
/// its queue). What happened comes back as ``Event``s, drained after each
/// call, so nothing runs inside nghttp2's callbacks but bookkeeping.
///
/// This is the only code that touches nghttp2; no pointer it hands to C
/// outlives the call that hands it. Not thread-safe: one connection, one thread.
public final class H2Session {
    public enum Role: Sendable { case client, server }

    /// A header field.
    public struct Header: Equatable, Sendable {
        public var name: String
        public var value: String
        /// Sent never-indexed: a value used once (an id) would only push
        /// useful entries out of HPACK's table.
        public var neverIndexed = false
        public init(_ name: String, _ value: String, neverIndexed: Bool = false) {
            (self.name, self.value, self.neverIndexed) = (name, value, neverIndexed)
        }
        public static func == (a: Header, b: Header) -> Bool { a.name == b.name && a.value == b.value }
    }

    public enum Event: Equatable, Sendable {
        /// A whole message arrived on `stream`: a request (server) or a response (client).
        case message(stream: Int32, headers: [Header], body: [UInt8])
        /// `stream` closed; `errorCode` is 0, or the RST_STREAM's code (7: REFUSED_STREAM).
        case streamClosed(stream: Int32, errorCode: UInt32)
        /// The peer sent GOAWAY: streams above `lastStreamID` were never processed.
        case goAway(lastStreamID: Int32, errorCode: UInt32)
        /// The peer's SETTINGS arrived (``remoteMaxConcurrentStreams`` may have changed).
        case settings
        /// The peer answered our PING.
        case pingAcknowledged
    }

    /// RFC 9113 error codes used here.
    public enum ErrorCode {
        public static let noError: UInt32 = 0
        public static let protocolError: UInt32 = 1
        public static let refusedStream: UInt32 = 7
        public static let cancel: UInt32 = 8
        public static let enhanceYourCalm: UInt32 = 11

        /// RFC 9113 §7's name for a code ("CANCEL"), or the number for one it does not define.
        public static func name(_ code: UInt32) -> String {
            let names = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
                         "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
                         "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"]
            return code < names.count ? names[Int(code)] : "error \(code)"
        }
    }

    public let role: Role
    private var session: OpaquePointer?
    private var events: [Event] = []
    /// A message still arriving: its fields, its body, and what the limits count.
    private struct Incoming {
        var headers: [Header] = []
        var body: [UInt8] = []
        /// Bytes of header fields received on the stream, as RFC 9113 counts them (name + value + 32).
        var headerBytes = 0
        /// The fields of the current block are not kept: an informational (1xx) response, or trailers.
        var skipBlock = false
    }
    /// Streams whose message is still arriving.
    private var partial: [Int32: Incoming] = [:]
    /// Bodies still to send, by stream: the bytes (shared, not copied) and how far they have been sent.
    private var outgoing: [Int32: (body: [UInt8], offset: Int)] = [:] {
        didSet { if outgoing.isEmpty { unsentBodyBytes = 0 } }
    }
    /// Bytes of request or response bodies not yet framed as DATA: what waits
    /// for the peer's window.
    public private(set) var unsentBodyBytes = 0

    /// Whether `stream`'s body has not all been framed yet (so its END_STREAM
    /// has not gone out, and the peer cannot have processed it).
    public func bodyIsUnsent(_ stream: Int32) -> Bool { outgoing[stream] != nil }
    /// The largest body a message may have; more ends the session
    /// (``receive(_:)`` throws, naming it): a peer that sends it is not one to trust further.
    public var maxBodyBytes = 1 << 20
    /// The most header bytes (RFC 9113's size: name + value + 32 per field)
    /// a stream may receive over all its header blocks; more ends the session.
    public var maxHeaderBytes = 1 << 20
    /// Why the session was ended by one of our own limits, for the error ``receive(_:)`` throws.
    public private(set) var violation: String?
    /// When set, only these header names are kept in messages (a client that
    /// reads `:status` and `retry-after` need not make strings of the rest).
    public var keptHeaders: [[UInt8]]? = nil

    /// - Parameter settings: our SETTINGS (id, value), sent first. nghttp2
    ///   sends the client preface itself.
    public init(role: Role, settings: [(id: Int32, value: UInt32)] = []) throws(H2Error) {
        self.role = role
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { throw H2Error("cannot allocate nghttp2 callbacks") }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, user in
            let me = H2Session.from(user)
            let stream = frame!.pointee.hd.stream_id
            if me.partial[stream] == nil {
                me.partial[stream] = Incoming()
            } else {
                // A second block on the stream: the final response after an
                // informational one (kept), or trailers after it (skipped, so
                // the response's `:status` is not lost).
                me.partial[stream]!.skipBlock = me.role == .client && me.partial[stream]!.headers.contains { $0.name == ":status" }
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameCount, value, valueCount, _, user in
            let me = H2Session.from(user)
            let stream = frame!.pointee.hd.stream_id
            guard var p = me.partial[stream] else { return 0 }
            p.headerBytes += nameCount + valueCount + 32
            if p.headerBytes > me.maxHeaderBytes {
                me.violation = "the peer sent more than \(me.maxHeaderBytes) bytes of header fields on stream \(stream)"
                return Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
            }
            if me.role == .client, nameCount == 7, valueCount > 0, value![0] == UInt8(ascii: "1"),
               UnsafeBufferPointer(start: name, count: nameCount).elementsEqual(":status".utf8) {
                // An informational response (RFC 9110 §15.2): the final one follows.
                p.headers.removeAll()
                p.skipBlock = true
            }
            me.partial[stream] = p
            if p.skipBlock { return 0 }
            if let kept = me.keptHeaders {
                let n = UnsafeBufferPointer(start: name, count: nameCount)
                guard kept.contains(where: { $0.elementsEqual(n) }) else { return 0 }
            }
            let header = Header(String(decoding: UnsafeBufferPointer(start: name, count: nameCount), as: UTF8.self),
                                String(decoding: UnsafeBufferPointer(start: value, count: valueCount), as: UTF8.self))
            me.partial[stream]!.headers.append(header)
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, stream, data, count, user in
            let me = H2Session.from(user)
            guard var p = me.partial[stream] else { return 0 }
            if p.body.count + count > me.maxBodyBytes {
                me.violation = "the peer sent a body of more than \(me.maxBodyBytes) bytes on stream \(stream)"
                return Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
            }
            me.partial[stream] = nil   // so the append does not copy
            p.body.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
            me.partial[stream] = p
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            let me = H2Session.from(user)
            let f = frame!.pointee
            switch UInt32(f.hd.type) {
            case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
                if f.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0, let p = me.partial.removeValue(forKey: f.hd.stream_id) {
                    me.events.append(.message(stream: f.hd.stream_id, headers: p.headers, body: p.body))
                }
            case NGHTTP2_GOAWAY.rawValue:
                me.events.append(.goAway(lastStreamID: f.goaway.last_stream_id, errorCode: f.goaway.error_code))
            case NGHTTP2_SETTINGS.rawValue where f.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0:
                me.events.append(.settings)
            case NGHTTP2_PING.rawValue where f.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
                me.events.append(.pingAcknowledged)
            default: break
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, stream, errorCode, user in
            let me = H2Session.from(user)
            me.partial[stream] = nil
            if let left = me.outgoing.removeValue(forKey: stream) { me.unsentBodyBytes -= left.body.count - left.offset }
            me.events.append(.streamClosed(stream: stream, errorCode: errorCode))
            return 0
        }
        let user = Unmanaged.passUnretained(self).toOpaque()
        let rc = role == .client ? nghttp2_session_client_new(&session, callbacks, user)
                                 : nghttp2_session_server_new(&session, callbacks, user)
        guard rc == 0, session != nil else { throw H2Error(code: rc, "cannot create an nghttp2 session") }
        var iv = settings.map { nghttp2_settings_entry(settings_id: $0.id, value: $0.value) }
        let sent = iv.withUnsafeMutableBufferPointer { nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress, $0.count) }
        guard sent == 0 else { throw H2Error(code: sent, "cannot submit SETTINGS") }
    }

    deinit { nghttp2_session_del(session) }

    private static func from(_ user: UnsafeMutableRawPointer?) -> H2Session {
        Unmanaged<H2Session>.fromOpaque(user!).takeUnretainedValue()
    }

    /// Feeds bytes the peer sent. Throws on a protocol violation (the
    /// session has queued a GOAWAY to say so: ``send(into:)`` it, then close).
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(H2Error) {
        guard bytes.count > 0 else { return }
        let n = nghttp2_session_mem_recv(session, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.count)
        if let violation { throw H2Error(violation) }
        if n < 0 { throw H2Error(code: Int32(n), "the peer broke the HTTP/2 protocol") }
    }

    /// Feeds the first `count` bytes of `buffer`.
    public func receive(_ buffer: [UInt8], count: Int) throws(H2Error) {
        var failure: H2Error?
        buffer.withUnsafeBytes { raw in
            do throws(H2Error) { try receive(UnsafeRawBufferPointer(rebasing: raw[0..<count])) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Appends everything the session has to send (frames, acknowledgements,
    /// queued requests as far as stream limits and flow control allow).
    public func send(into out: inout [UInt8]) throws(H2Error) {
        while true {
            var data: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &data)
            if n < 0 { throw H2Error(code: Int32(n), "cannot frame what is to be sent") }
            if n == 0 { return }
            out.append(contentsOf: UnsafeBufferPointer(start: data, count: n))
        }
    }

    /// Takes the events since the last call.
    public func drainEvents() -> [Event] {
        defer { events.removeAll(keepingCapacity: true) }
        return events
    }

    /// Whether the session still wants to read or write: false for both once
    /// a GOAWAY has been sent and received and every stream is done.
    public var isActive: Bool { nghttp2_session_want_read(session) != 0 || nghttp2_session_want_write(session) != 0 }
    public var wantsWrite: Bool { nghttp2_session_want_write(session) != 0 }

    /// The peer's MAX_CONCURRENT_STREAMS as last received (unlimited until it says).
    public var remoteMaxConcurrentStreams: UInt32 {
        nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
    }

    /// Bytes of DATA the peer's connection-level flow-control window lets us
    /// send now: from far away it, not the link, limits a connection.
    public var remoteWindow: Int { Int(nghttp2_session_get_remote_window_size(session)) }

    /// The highest stream the peer opened and we processed (for our GOAWAY).
    public var lastProcessedStreamID: Int32 { nghttp2_session_get_last_proc_stream_id(session) }

    /// Queues a request; returns its stream id. The body is copied.
    public func submitRequest(headers: [Header], body: [UInt8]) throws(H2Error) -> Int32 {
        let stream = try withHeaderFields(headers) { nva, count in
            var provider = Self.bodyProvider()
            if body.isEmpty { return nghttp2_submit_request(session, nil, nva, count, nil, nil) }
            return nghttp2_submit_request(session, nil, nva, count, &provider, nil)
        }
        guard stream > 0 else { throw H2Error(code: stream, "cannot submit a request") }
        if !body.isEmpty { outgoing[stream] = (body, 0); unsentBodyBytes += body.count }
        return stream
    }

    /// Queues a request made from `template`, whose variable fields `fill`
    /// writes (slot, room) → bytes written; the body is `body[bodyStart...]`,
    /// shared rather than copied. Nothing is allocated for the headers.
    public func submitRequest(_ template: RequestTemplate, body: [UInt8], bodyStart: Int,
                              fill: (Int, UnsafeMutableBufferPointer<UInt8>) -> Int) throws(H2Error) -> Int32 {
        template.fill(fill)
        var provider = Self.bodyProvider()
        let stream = body.count > bodyStart
            ? nghttp2_submit_request(session, nil, template.nva.baseAddress, template.nva.count, &provider, nil)
            : nghttp2_submit_request(session, nil, template.nva.baseAddress, template.nva.count, nil, nil)
        guard stream > 0 else { throw H2Error(code: stream, "cannot submit a request") }
        if body.count > bodyStart { outgoing[stream] = (body, bodyStart); unsentBodyBytes += body.count - bodyStart }
        return stream
    }

    /// Queues the response on `stream` (server). An empty body sends headers only.
    public func submitResponse(stream: Int32, headers: [Header], body: [UInt8]) throws(H2Error) {
        let rc = try withHeaderFields(headers) { nva, count in
            var provider = Self.bodyProvider()
            if body.isEmpty { return nghttp2_submit_response(session, stream, nva, count, nil) }
            return nghttp2_submit_response(session, stream, nva, count, &provider)
        }
        guard rc == 0 else { throw H2Error(code: rc, "cannot submit a response on stream \(stream)") }
        if !body.isEmpty { outgoing[stream] = (body, 0); unsentBodyBytes += body.count }
    }

    /// Resets `stream` with `errorCode`.
    public func resetStream(_ stream: Int32, errorCode: UInt32) {
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, errorCode)
    }

    /// Queues a GOAWAY naming `lastStreamID` (default: the last stream processed).
    public func submitGoAway(errorCode: UInt32 = ErrorCode.noError, lastStreamID: Int32? = nil) {
        _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID ?? lastProcessedStreamID, errorCode, nil, 0)
    }

    /// Queues a PING; ``Event/pingAcknowledged`` reports its answer.
    public func submitPing() {
        _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
    }

    /// Queues new SETTINGS (a server lowering or raising its stream limit).
    public func submitSettings(_ settings: [(id: Int32, value: UInt32)]) {
        var iv = settings.map { nghttp2_settings_entry(settings_id: $0.id, value: $0.value) }
        _ = iv.withUnsafeMutableBufferPointer { nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress, $0.count) }
    }

    /// nghttp2 copies header fields during the submit call, so they are laid
    /// out in one buffer that lives only for that call.
    private func withHeaderFields<R>(_ headers: [Header], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) throws(H2Error) -> R {
        var bytes: [UInt8] = []
        var spans: [(Int, Int, Int, Int, UInt8)] = []
        for h in headers {
            let n = bytes.count
            bytes.append(contentsOf: h.name.utf8)
            let v = bytes.count
            bytes.append(contentsOf: h.value.utf8)
            spans.append((n, v - n, v, bytes.count - v, UInt8(h.neverIndexed ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue)))
        }
        bytes.append(0)   // never empty, so the base address exists
        return bytes.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            var nva = spans.map { s in
                nghttp2_nv(name: base + s.0, value: base + s.2, namelen: s.1, valuelen: s.3, flags: s.4)
            }
            return nva.withUnsafeMutableBufferPointer { body(UnsafePointer($0.baseAddress!), $0.count) }
        }
    }

    /// A data provider reading the stream's body from ``outgoing``.
    private static func bodyProvider() -> nghttp2_data_provider {
        var provider = nghttp2_data_provider()
        provider.read_callback = { _, stream, buffer, length, flags, _, user in
            let me = H2Session.from(user)
            guard let entry = me.outgoing[stream] else {
                flags!.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
                return 0
            }
            let n = min(length, entry.body.count - entry.offset)
            me.unsentBodyBytes -= n
            entry.body.withUnsafeBufferPointer { b in
                buffer!.update(from: b.baseAddress! + entry.offset, count: n)
            }
            if entry.offset + n == entry.body.count {
                flags!.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
                me.outgoing[stream] = nil
            } else {
                me.outgoing[stream]!.offset += n
            }
            return n
        }
        return provider
    }
}
