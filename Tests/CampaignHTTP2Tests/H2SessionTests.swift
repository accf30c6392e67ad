import Testing
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
