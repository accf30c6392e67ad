import Testing
@testable import APNSWire
import CampaignIO

/// Golden vectors written by hand from the guides' packet layouts:
/// 2011 guide figures 5-1 (simple) and 5-2 (enhanced); binary provider API
/// tables A-1 to A-3 (frame).
@Suite struct NotificationEncodingTests {
    static let token: [UInt8] = Array(0..<32)
    static let payload: [UInt8] = Array(#"{"aps":{"alert":"Hi"}}"#.utf8)  // 22 bytes

    @Test func simpleFormatGoldenBytes() {
        let n = Notification(format: .simple, token: Self.token, payload: Self.payload)
        var expected: [UInt8] = [0x00, 0x00, 0x20]   // command 0, token length 32
        expected += Self.token
        expected += [0x00, 0x16]                      // payload length 22
        expected += Self.payload
        #expect(n.encoded() == expected)
        #expect(n.encodedCount == 1 + 2 + 32 + 2 + 22)
    }

    @Test func enhancedFormatGoldenBytes() {
        let n = Notification(
            format: .enhanced, token: Self.token, payload: Self.payload,
            identifier: 1234, expiry: 0x5F5E_1000)
        var expected: [UInt8] = [0x01]
        expected += [0x00, 0x00, 0x04, 0xD2]          // identifier 1234
        expected += [0x5F, 0x5E, 0x10, 0x00]          // expiry
        expected += [0x00, 0x20] + Self.token
        expected += [0x00, 0x16] + Self.payload
        #expect(n.encoded() == expected)
        #expect(n.encodedCount == expected.count)
    }

    @Test func frameFormatGoldenBytes() {
        let n = Notification(
            format: .frame, token: Self.token, payload: Self.payload,
            identifier: 0x0102_0304, expiry: 0xFFFF_FFFF, priority: .conservePower)
        let frameLength = (3 + 32) + (3 + 22) + 7 + 7 + 4   // 78 = 0x4E
        var expected: [UInt8] = [0x02, 0x00, 0x00, 0x00, UInt8(frameLength)]
        expected += [0x01, 0x00, 0x20] + Self.token
        expected += [0x02, 0x00, 0x16] + Self.payload
        expected += [0x03, 0x00, 0x04, 0x01, 0x02, 0x03, 0x04]
        expected += [0x04, 0x00, 0x04, 0xFF, 0xFF, 0xFF, 0xFF]
        expected += [0x05, 0x00, 0x01, 0x05]
        #expect(n.encoded() == expected)
        #expect(n.encodedCount == expected.count)
    }

    @Test func frameLeavesOutAbsentOptionalItems() {
        let n = Notification(format: .frame, token: [0xAB], payload: [0x7B, 0x7D])
        #expect(n.encoded() == [0x02, 0, 0, 0, 9, 0x01, 0, 1, 0xAB, 0x02, 0, 2, 0x7B, 0x7D])
    }

    @Test func encodingAppendsToAReusedBuffer() {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(4096)
        let n = Notification(format: .enhanced, token: Self.token, payload: Self.payload, identifier: 7, expiry: 0)
        for _ in 0..<10 { n.encode(into: &buffer) }
        #expect(buffer.count == 10 * n.encodedCount)
        let capacity = buffer.capacity
        buffer.removeAll(keepingCapacity: true)
        n.encode(into: &buffer)
        #expect(buffer.capacity == capacity)
        #expect(buffer == n.encoded())
    }
}

@Suite struct NotificationDecodingTests {
    static func sample(_ format: NotificationFormat, id: UInt32) -> Notification {
        let token = (0..<UInt8(format == .frame ? 40 : 32)).map { $0 &+ UInt8(truncatingIfNeeded: id) }
        let payload = Array(#"{"aps":{"alert":"n\#(id)"}}"#.utf8)
        switch format {
        case .simple: return Notification(format: .simple, token: token, payload: payload)
        case .enhanced: return Notification(format: .enhanced, token: token, payload: payload, identifier: id, expiry: id * 3)
        case .frame: return Notification(
            format: .frame, token: token, payload: payload, identifier: id, expiry: 99,
            priority: id % 2 == 0 ? .immediate : .conservePower)
        }
    }

    static func decodeAll(_ chunks: [[UInt8]]) throws -> [Notification] {
        var decoder = NotificationDecoder()
        var out: [Notification] = []
        for chunk in chunks {
            decoder.append(chunk)
            while let n = try decoder.next() { out.append(Notification(n)) }
        }
        #expect(decoder.bufferedByteCount == 0)
        return out
    }

    @Test(arguments: NotificationFormat.allCases)
    func roundTripsEveryFormat(format: NotificationFormat) throws {
        let originals = (1...50).map { Self.sample(format, id: UInt32($0)) }
        var stream: [UInt8] = []
        for n in originals { n.encode(into: &stream) }
        #expect(try Self.decodeAll([stream]) == originals)
    }

    @Test func decodesMixedFormatsFedOneByteAtATime() throws {
        let originals = (1...30).map { Self.sample(NotificationFormat.allCases[$0 % 3], id: UInt32($0)) }
        var stream: [UInt8] = []
        for n in originals { n.encode(into: &stream) }
        #expect(try Self.decodeAll(stream.map { [$0] }) == originals)
    }

    @Test(arguments: [1, 2, 3, 5, 8, 13, 100, 4096])
    func decodesInRandomChunkSizes(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        let originals = (1...300).map { Self.sample(NotificationFormat.allCases[Int(rng.next() % 3)], id: UInt32($0)) }
        var stream: [UInt8] = []
        for n in originals { n.encode(into: &stream) }
        var chunks: [[UInt8]] = []
        var i = 0
        while i < stream.count {
            let size = 1 + Int(rng.next() % 300)
            chunks.append(Array(stream[i..<min(stream.count, i + size)]))
            i += size
        }
        #expect(try Self.decodeAll(chunks) == originals)
    }

    @Test func waitsForTheRestOfASplitFrame() throws {
        let bytes = Self.sample(.frame, id: 5).encoded()
        var decoder = NotificationDecoder()
        decoder.append(bytes.prefix(bytes.count - 1))
        #expect(try decoder.next() == nil)
        decoder.append(bytes.suffix(1))
        let n = try #require(try decoder.next())
        #expect(n.identifier == 5)
        #expect(n.encodedCount == bytes.count)
    }

    static func expectRefusal(
        _ bytes: [UInt8], status: ErrorResponse.Status, identifier: UInt32?,
        reason: NotificationDecodingError.Reason, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var decoder = NotificationDecoder()
        decoder.append(bytes)
        do {
            let n = try decoder.next()
            Issue.record("expected a refusal, got \(String(describing: n))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.status == status, sourceLocation: sourceLocation)
            #expect(error.identifier == identifier, sourceLocation: sourceLocation)
            #expect(error.reason == reason, sourceLocation: sourceLocation)
        }
    }

    @Test func refusesAnUnknownCommandWithProtocolError() {
        Self.expectRefusal([0x07, 0, 0, 0], status: .protocolError, identifier: nil, reason: .unknownCommand(7))
    }

    @Test func refusesLegacyTokenSizesOtherThan32BeforeReadingThem() {
        // Enhanced, identifier 9, token length 0x0400: refused from the header alone.
        Self.expectRefusal([1, 0, 0, 0, 9, 0, 0, 0, 0, 0x04, 0x00], status: .invalidTokenSize, identifier: 9,
                           reason: .invalidTokenSize(1024))
        Self.expectRefusal([1, 0, 0, 0, 9, 0, 0, 0, 0, 0x00, 0x00], status: .missingDeviceToken, identifier: 9,
                           reason: .missingDeviceToken)
        Self.expectRefusal([0, 0x00, 0x21], status: .invalidTokenSize, identifier: nil, reason: .invalidTokenSize(33))
    }

    @Test func refusesLegacyPayloadsOverTheLimitOrEmpty() {
        var big = [UInt8]([1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 32]) + Array(repeating: 1, count: 32)
        big += [0x01, 0x01]   // 257 bytes declared
        Self.expectRefusal(big, status: .invalidPayloadSize, identifier: 4, reason: .invalidPayloadSize(257))
        var empty = [UInt8]([1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 32]) + Array(repeating: 1, count: 32)
        empty += [0, 0]
        Self.expectRefusal(empty, status: .missingPayload, identifier: 4, reason: .missingPayload)
    }

    @Test func acceptsA256BytePayloadInTheEnhancedFormat() throws {
        let payload = Array(repeating: UInt8(ascii: "x"), count: 256)
        let n = Notification(format: .enhanced, token: Array(repeating: 1, count: 32), payload: payload, identifier: 1, expiry: 0)
        #expect(try Self.decodeAll([n.encoded()]) == [n])
    }

    @Test func frameLimits() throws {
        let ok = Notification(format: .frame, token: Array(repeating: 1, count: 100),
                              payload: Array(repeating: 0x20, count: 2048), identifier: 3)
        #expect(try Self.decodeAll([ok.encoded()]) == [ok])
        var tooLongToken = ok; tooLongToken.token.append(0)
        Self.expectRefusal(tooLongToken.encoded(), status: .invalidTokenSize, identifier: nil, reason: .invalidTokenSize(101))
        var tooBig = ok; tooBig.payload.append(0x20)
        Self.expectRefusal(tooBig.encoded(), status: .invalidPayloadSize, identifier: nil, reason: .invalidPayloadSize(2049))
    }

    @Test func frameItemErrorsNameTheIdentifierWhenItCameFirst() {
        // Identifier item, then an empty token item.
        let bytes: [UInt8] = [2, 0, 0, 0, 10, 3, 0, 4, 0, 0, 0, 42, 1, 0, 0]
        Self.expectRefusal(bytes, status: .missingDeviceToken, identifier: 42, reason: .missingDeviceToken)
    }

    @Test func frameStructuralErrors() {
        Self.expectRefusal([2, 0, 0, 0, 3, 9, 0, 0], status: .protocolError, identifier: nil, reason: .unknownItem(9))
        Self.expectRefusal([2, 0, 0, 0, 8, 1, 0, 1, 7, 1, 0, 1, 7], status: .protocolError, identifier: nil,
                           reason: .duplicateItem(1))
        Self.expectRefusal([2, 0, 0, 0, 4, 1, 0, 2, 7], status: .protocolError, identifier: nil,
                           reason: .itemOverrunsFrame(item: 1))
        Self.expectRefusal([2, 0, 0, 0, 4, 3, 0, 2, 0, 0], status: .protocolError, identifier: nil,
                           reason: .invalidItemLength(item: 3, length: 2))
        Self.expectRefusal([2, 0, 0, 0, 4, 5, 0, 1, 7], status: .protocolError, identifier: nil,
                           reason: .invalidPriority(7))
        Self.expectRefusal([2, 0, 0, 0, 0], status: .missingDeviceToken, identifier: nil, reason: .missingDeviceToken)
        Self.expectRefusal([2, 0, 0, 0, 4, 1, 0, 1, 7], status: .missingPayload, identifier: nil, reason: .missingPayload)
    }

    /// Found by fuzzing: a frame whose length ends two bytes into an item
    /// header. Fed a byte at a time, the decoder used to name item 0 (not yet
    /// read); it now waits for the item byte and names item 5 either way.
    @Test func aPartialItemHeaderAtTheFrameEndIsNamedAlikeHoweverTheBytesArrive() throws {
        let bytes: [UInt8] = [2, 0, 0, 0, 9, 3, 0, 4, 0, 0, 0, 9, 5, 0, 1, 10]
        for chunk in [1, 2, bytes.count] {
            var decoder = NotificationDecoder()
            var failure: NotificationDecodingError? = nil
            for start in stride(from: 0, to: bytes.count, by: chunk) where failure == nil {
                decoder.append(bytes[start..<min(bytes.count, start + chunk)])
                do { _ = try decoder.next() } catch { failure = error }
            }
            #expect(failure?.reason == .itemOverrunsFrame(item: 5), "chunks of \(chunk)")
            #expect(failure?.identifier == 9)
        }
    }

    @Test func aHugeDeclaredFrameLengthDoesNotMakeTheDecoderWait() {
        // 4 GB declared; the first item is already invalid, so the decoder answers now.
        Self.expectRefusal([2, 0xFF, 0xFF, 0xFF, 0xFF, 0x0B, 0, 0], status: .protocolError, identifier: nil,
                           reason: .unknownItem(11))
    }

    @Test func staysFailedAfterAnError() {
        var decoder = NotificationDecoder()
        decoder.append([9])
        #expect(throws: NotificationDecodingError.self) { try decoder.next() }
        decoder.append(Self.sample(.enhanced, id: 1).encoded())
        #expect(throws: NotificationDecodingError.self) { try decoder.next() }
    }

    @Test func errorSentenceNamesTheOffsetAndStatus() {
        var decoder = NotificationDecoder()
        decoder.append(Self.sample(.simple, id: 1).encoded() + [0x63])
        #expect(throws: Never.self) { _ = try decoder.next() }
        do { _ = try decoder.next() } catch {
            #expect(error.streamOffset == Self.sample(.simple, id: 1).encodedCount)
            #expect(error.description.contains("status 128 (protocol error)"))
            #expect(error.errorResponse == ErrorResponse(status: .protocolError, identifier: 0))
        }
    }
}

