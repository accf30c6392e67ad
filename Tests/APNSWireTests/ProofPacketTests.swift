import Testing
@testable import APNSWire

/// The proof of acceptance: a packet the gateway must refuse with status 5
/// (invalid token size), naming our identifier. Golden bytes by hand from the
/// guides' layouts (2011 guide figure 5-2; binary provider API table A-3).
@Suite struct ProofPacketTests {
    static let payload: [UInt8] = Array(#"{"aps":{}}"#.utf8)   // 10 bytes

    @Test func enhancedProofGoldenBytes() {
        var out: [UInt8] = []
        #expect(NotificationEncoder.appendProof(identifier: 0x8100_0002, format: .enhanced, to: &out))
        var expected: [UInt8] = [0x01, 0x81, 0x00, 0x00, 0x02, 0, 0, 0, 0]   // command 1, identifier, expiry 0
        expected += [0x00, 0x01, 0x00]                                    // a 1-byte token: never valid, never empty
        expected += [0x00, 0x0A] + Self.payload
        #expect(out == expected)
    }

    @Test func frameProofGoldenBytesIdentifierFirst() {
        var out: [UInt8] = []
        #expect(NotificationEncoder.appendProof(identifier: 7, format: .frame, to: &out))
        var expected: [UInt8] = [0x02, 0x00, 0x00, 0x00, UInt8(7 + 104 + 13)]   // command 2, frame length 124
        expected += [0x03, 0x00, 0x04, 0, 0, 0, 7]                                 // identifier item first
        expected += [0x01, 0x00, 0x65] + [UInt8](repeating: 0, count: 101)         // a 101-byte token: one over the limit
        expected += [0x02, 0x00, 0x0A] + Self.payload
        #expect(out == expected)
    }

    @Test func theSimpleFormatHasNoProof() {
        var out: [UInt8] = [9]
        #expect(!NotificationEncoder.appendProof(identifier: 1, format: .simple, to: &out))
        #expect(out == [9])
    }

    @Test func theGatewaysRulesRefuseEveryProofWithStatusFive() throws {
        for format in [NotificationFormat.enhanced, .frame] {
            var out: [UInt8] = []
            NotificationEncoder.appendProof(identifier: 42, format: format, to: &out)
            var decoder = NotificationDecoder()
            decoder.append(out)
            do {
                _ = try decoder.next()
                Issue.record("\(format): a proof was accepted")
            } catch {
                #expect(error.errorResponse == ErrorResponse(status: .invalidTokenSize, identifier: 42), "\(format)")
            }
        }
    }

    @Test(arguments: [NotificationFormat.simple, .enhanced, .frame])
    func theTokenOfAnEncodedPacketIsFoundWhereTheEncoderPutIt(format: NotificationFormat) {
        let token = (0..<32).map { UInt8($0 * 3) }
        var packets: [UInt8] = [0xEE, 0xEE]   // another packet's tail before it
        let start = packets.count
        switch format {
        case .simple: NotificationEncoder.appendSimple(token: token, payload: Self.payload, to: &packets)
        case .enhanced: NotificationEncoder.appendEnhanced(identifier: 1, expiry: 2, token: token, payload: Self.payload, to: &packets)
        case .frame: NotificationEncoder.appendFrame(token: token, payload: Self.payload, identifier: 1, expiry: 2, priority: .immediate, to: &packets)
        }
        let range = NotificationEncoder.deviceTokenRange(inPacket: packets[start...], format: format)
        #expect(Array(packets[range]) == token)
    }
}
