import Testing
import CampaignTestSupport
@testable import CampaignHTTP2

/// A client and a server session wired back to back in memory.
struct H2Pair {
    let client: H2Session
    let server: H2Session

    init(serverMaxStreams: UInt32 = 100) throws {
        client = try H2Session(role: .client)
        server = try H2Session(role: .server, settings: [(id: 3, value: serverMaxStreams)])   // SETTINGS_MAX_CONCURRENT_STREAMS
    }

    /// Moves bytes both ways until neither side has anything to send; returns the events of each.
    func exchange() throws -> (client: [H2Session.Event], server: [H2Session.Event]) {
        var clientEvents: [H2Session.Event] = [], serverEvents: [H2Session.Event] = []
        for _ in 0..<100 {
            var toServer: [UInt8] = [], toClient: [UInt8] = []
            try client.send(into: &toServer)
            try toServer.withUnsafeBytes { try server.receive($0) }
            serverEvents += server.drainEvents()
            try server.send(into: &toClient)
            try toClient.withUnsafeBytes { try client.receive($0) }
            clientEvents += client.drainEvents()
            if toServer.isEmpty && toClient.isEmpty { break }
        }
        return (clientEvents, serverEvents)
    }
}

@Suite struct H2SessionTests {
    static func request(_ path: String) -> [H2Session.Header] {
        [.init(":method", "POST"), .init(":scheme", "https"), .init(":path", path), .init(":authority", "localhost"),
         .init("apns-topic", "com.example.shop")]
    }

    @Test func aRequestAndItsResponseCrossWithHeadersAndBodies() throws {
        let pair = try H2Pair()
        let body = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        let stream = try pair.client.submitRequest(headers: Self.request("/3/device/ab"), body: body)
        #expect(stream == 1)
        let first = try pair.exchange()
        guard case .message(let s, let headers, let got)? = first.server.first(where: { if case .message = $0 { true } else { false } }) else {
            Issue.record("no request: \(first.server)"); return
        }
        #expect(s == 1 && got == body)
        #expect(headers.contains(.init(":path", "/3/device/ab")) && headers.contains(.init("apns-topic", "com.example.shop")))
        try pair.server.submitResponse(stream: 1, headers: [.init(":status", "400"), .init("apns-id", "x")], body: Array(#"{"reason":"BadDeviceToken"}"#.utf8))
        let second = try pair.exchange()
        #expect(second.client.contains(.message(stream: 1, headers: [.init(":status", "400"), .init("apns-id", "x")], body: Array(#"{"reason":"BadDeviceToken"}"#.utf8))))
        #expect(second.client.contains(.streamClosed(stream: 1, errorCode: 0)))
    }

    @Test func theServersStreamLimitHoldsRequestsBackUntilStreamsClose() throws {
        let pair = try H2Pair(serverMaxStreams: 2)
        _ = try pair.exchange()   // SETTINGS both ways
        #expect(pair.client.remoteMaxConcurrentStreams == 2)
        for i in 0..<5 { _ = try pair.client.submitRequest(headers: Self.request("/3/device/\(i)"), body: [0x7B, 0x7D]) }
        var received = try pair.exchange().server.filter { if case .message = $0 { true } else { false } }.count
        #expect(received == 2)
        for stream in [Int32(1), 3] { try pair.server.submitResponse(stream: stream, headers: [.init(":status", "200")], body: []) }
        received = try pair.exchange().server.filter { if case .message = $0 { true } else { false } }.count
        #expect(received == 2)
    }

    @Test func aRefusedStreamAndAGoAwayReachTheClient() throws {
        let pair = try H2Pair()
        for i in 0..<3 { _ = try pair.client.submitRequest(headers: Self.request("/3/device/\(i)"), body: [0x7B, 0x7D]) }
        _ = try pair.exchange()
        pair.server.resetStream(3, errorCode: H2Session.ErrorCode.refusedStream)
        try pair.server.submitResponse(stream: 1, headers: [.init(":status", "200")], body: [])
        pair.server.submitGoAway(lastStreamID: 3)
        let events = try pair.exchange().client
        #expect(events.contains(.streamClosed(stream: 3, errorCode: 7)))
        #expect(events.contains(.goAway(lastStreamID: 3, errorCode: 0)))
        #expect(events.contains(.streamClosed(stream: 5, errorCode: 7)), "a stream above last-stream-id closes as refused: \(events)")
    }

    @Test func aPingIsAnswered() throws {
        let pair = try H2Pair()
        pair.client.submitPing()
        #expect(try pair.exchange().client.contains(.pingAcknowledged))
    }

    @Test func garbageIsAProtocolError() throws {
        let server = try H2Session(role: .server)
        let garbage = Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(throws: H2Error.self) { try garbage.withUnsafeBytes { try server.receive($0) } }
    }

    @Test func aBodyLargerThanAFrameArrivesWhole() throws {
        let pair = try H2Pair()
        let body = (0..<40_000).map { UInt8($0 % 251) }
        _ = try pair.client.submitRequest(headers: Self.request("/big"), body: body)
        let events = try pair.exchange().server
        #expect(events.contains { if case .message(1, _, let b) = $0 { b == body } else { false } })
    }
}

/// What a client session makes of answers a server writes by hand (frames
/// nghttp2's own server would never send), and the limits that protect it.
@Suite struct H2ClientAnswerTests {
    /// A client with request 1 sent, and the server's (empty) SETTINGS received.
    static func client(maxHeaderBytes: Int = 1 << 20, maxBodyBytes: Int = 1 << 20) throws -> H2Session {
        let client = try H2Session(role: .client)
        client.maxHeaderBytes = maxHeaderBytes
        client.maxBodyBytes = maxBodyBytes
        #expect(try client.submitRequest(headers: H2SessionTests.request("/3/device/ab"), body: [0x7B, 0x7D]) == 1)
        var out: [UInt8] = []
        try client.send(into: &out)
        try feed(client, Frame.settings([]).bytes)
        return client
    }

    static func feed(_ session: H2Session, _ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try session.receive($0) }
    }

    static func messages(_ events: [H2Session.Event]) -> [[H2Session.Header]] {
        events.compactMap { if case .message(_, let headers, _) = $0 { headers } else { nil } }
    }

    @Test func anInformationalAnswerIsSkippedAndTrailersKeepTheStatus() throws {
        let client = try Self.client()
        try Self.feed(client, Frame.headers(stream: 1, status: "103", extra: [("link", "</x>")], endStream: false).bytes
            + Frame.headers(stream: 1, status: "200", extra: [("apns-id", "A")], endStream: false).bytes
            + Frame(type: 1, flags: 0x5, stream: 1, payload: HPACK.literal("x-trailer", "1")).bytes)
        let messages = Self.messages(client.drainEvents())
        #expect(messages.count == 1)
        #expect(messages.first?.filter { $0.name == ":status" } == [.init(":status", "200")], "\(messages)")
        #expect(messages.first?.contains(.init("x-trailer", "1")) == false, "trailers are not the response's fields")
    }

    @Test func headerFieldsOverTheLimitEndTheSessionNamingIt() throws {
        let client = try Self.client(maxHeaderBytes: 8_192)
        var block = HPACK.status("200")
        for i in 0..<4 { block += HPACK.literal("x-big-\(i)", String(repeating: "b", count: 3_000)) }
        #expect(throws: H2Error("the peer sent more than 8192 bytes of header fields on stream 1")) {
            try Self.feed(client, Frame.headerBlock(stream: 1, block: block, endStream: true))
        }
        #expect(Self.messages(client.drainEvents()).isEmpty)
    }

    @Test func aBodyOverTheLimitEndsTheSessionNamingIt() throws {
        let client = try Self.client(maxBodyBytes: 1_000)
        let data = Frame(type: 0, flags: 1, stream: 1, payload: [UInt8](repeating: 0x20, count: 1_001)).bytes
        #expect(throws: H2Error("the peer sent a body of more than 1000 bytes on stream 1")) {
            try Self.feed(client, Frame.headers(stream: 1, status: "400", extra: [], endStream: false).bytes + data)
        }
    }

    @Test func errorCodesHaveTheirRFCNames() {
        #expect(H2Session.ErrorCode.name(7) == "REFUSED_STREAM" && H2Session.ErrorCode.name(8) == "CANCEL")
        #expect(H2Session.ErrorCode.name(99) == "error 99")
    }
}
