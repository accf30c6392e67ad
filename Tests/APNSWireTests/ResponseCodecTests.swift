import Testing
@testable import APNSWire

@Suite struct ErrorResponseTests {
    /// Figure 5-3 / A-2: |8|status|identifier (4, as the provider sent it)|.
    @Test(arguments: ErrorResponse.Status.allDefined)
    func everyStatusHasGoldenBytesAndAMeaning(status: ErrorResponse.Status) throws {
        let packet = ErrorResponse(status: status, identifier: 0x0A0B_0C0D)
        #expect(packet.encoded() == [0x08, status.rawValue, 0x0A, 0x0B, 0x0C, 0x0D])
        #expect(ErrorResponse(bytes: packet.encoded()) == packet)
        #expect(status.isDefined)
        #expect(status.meaning != "undefined status")
    }

    @Test func meaningsFollowTheGuides() {
        #expect(ErrorResponse.Status(rawValue: 8).meaning == "invalid token")
        #expect(ErrorResponse.Status(rawValue: 10) == .shutdown)
        #expect(ErrorResponse.Status(rawValue: 128).meaning == "protocol error")
        #expect(ErrorResponse.Status(rawValue: 255).meaning == "none (unknown)")
        #expect(ErrorResponse.Status.allDefined.map(\.rawValue) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 128, 255])
    }

    @Test func unknownStatusCodesAreKept() throws {
        let packet = try #require(ErrorResponse(bytes: [8, 9, 0, 0, 0, 1]))
        #expect(packet.status.rawValue == 9)
        #expect(!packet.status.isDefined)
        #expect(packet.description.contains("undefined status"))
    }

    @Test func streamingDecoderHandlesSplitsAndRuns() throws {
        var stream: [UInt8] = []
        let packets = (0..<20).map { ErrorResponse(status: ErrorResponse.Status.allDefined[$0 % 12], identifier: UInt32($0)) }
        for p in packets { p.encode(into: &stream) }
        var decoder = ErrorResponseDecoder()
        var out: [ErrorResponse] = []
        for byte in stream {
            decoder.append([byte])
            while let p = try decoder.next() { out.append(p) }
        }
        #expect(out == packets)
        var whole = ErrorResponseDecoder()
        whole.append(stream)
        var count = 0
        while try whole.next() != nil { count += 1 }
        #expect(count == 20)
    }

    @Test func decoderRefusesAnythingButCommand8() {
        var decoder = ErrorResponseDecoder()
        decoder.append([8, 1, 0, 0, 0, 1, 0x41])
        #expect(throws: Never.self) { _ = try decoder.next() }
        do {
            _ = try decoder.next()
            Issue.record("expected an error")
        } catch {
            #expect(error.reason == .unexpectedCommand(0x41))
            #expect(error.streamOffset == 6)
        }
    }
}

@Suite struct FeedbackTupleTests {
    /// Figure 5-4 / A-3: |timestamp (4)|token length (2)|token|.
    @Test func goldenBytes() {
        let tuple = FeedbackTuple(timestamp: 0x4F00_0001, token: Array(repeating: 0xEE, count: 32))
        #expect(tuple.encoded() == [0x4F, 0x00, 0x00, 0x01, 0x00, 0x20] + Array(repeating: 0xEE, count: 32))
    }

    @Test func streamingDecoderRoundTripsInChunks() throws {
        let tuples = (0..<25).map { FeedbackTuple(timestamp: UInt32(1_700_000_000 + $0), token: Array(repeating: UInt8($0), count: 32)) }
        var stream: [UInt8] = []
        for t in tuples { t.encode(into: &stream) }
        var decoder = FeedbackTupleDecoder()
        var out: [FeedbackTuple] = []
        var i = 0
        while i < stream.count {
            decoder.append(stream[i..<min(i + 7, stream.count)])
            while let t = try decoder.next() { out.append(t) }
            i += 7
        }
        #expect(out == tuples)
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test func refusesImpossibleTokenLengths() {
        var decoder = FeedbackTupleDecoder()
        decoder.append([0, 0, 0, 1, 0xFF, 0xFF])
        #expect(throws: ResponseDecodingError(reason: .tokenTooLong(65535), streamOffset: 0)) { try decoder.next() }
        var empty = FeedbackTupleDecoder()
        empty.append([0, 0, 0, 1, 0, 0])
        #expect(throws: ResponseDecodingError(reason: .emptyToken, streamOffset: 0)) { try empty.next() }
    }
}
