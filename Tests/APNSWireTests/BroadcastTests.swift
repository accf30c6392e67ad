import APNSWire
import Testing

@Suite struct BroadcastTests {
    @Test func channelIdsAreCanonicalBase64() {
        // RFC 4648 §10's vectors.
        for (bytes, text) in [("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")] {
            #expect(String(decoding: Base64.encode(Array(bytes.utf8)), as: UTF8.self) == text)
            #expect(ChannelID(base64: text)?.bytes == Array(bytes.utf8))
            #expect(ChannelID(base64: text)?.base64 == text)
        }
        #expect(ChannelID(base64: " dHN0LXNyY2gtY2hubA== ")?.base64 == "dHN0LXNyY2gtY2hubA==")
        #expect(ChannelID(base64: "Zg") == nil, "unpadded")
        #expect(ChannelID(base64: "Zh==") == nil, "bits under the padding")
        #expect(ChannelID(base64: "Zm9v!A==") == nil)
        #expect(ChannelID(base64: "Zm-_") == nil, "base64url is not Apple's")
        #expect(ChannelID(base64: "") == nil)
        // Any size Apple may give (a device token's 100 bytes is no bound), up to 4,096 characters.
        #expect(ChannelID(base64: String(repeating: "AAAA", count: 34))?.bytes.count == 102)
        #expect(ChannelID(base64: String(repeating: "AAAA", count: 1024))?.bytes.count == 3072)
        #expect(ChannelID(base64: String(repeating: "AAAA", count: 1025)) == nil, "3,075 bytes")
    }

    @Test func answersAreClassedAsTheReferenceTableSays() {
        #expect(Broadcast.AnswerClass(status: 400, reason: "ChannelNotRegistered") == .channelGone)
        #expect(Broadcast.AnswerClass(status: 400, reason: "CannotCreateChannelConfig") == .accountState)
        #expect(Broadcast.AnswerClass(status: 400, reason: "FeatureNotEnabled") == .accountState)
        #expect(Broadcast.AnswerClass(status: 400, reason: "BadChannelId") == .requestWrong)
        #expect(Broadcast.AnswerClass(status: 413, reason: "PayloadTooLarge") == .requestWrong)
        #expect(Broadcast.AnswerClass(status: 403, reason: "TopicMismatch") == .credentials)
        #expect(Broadcast.AnswerClass(status: 403, reason: "SomethingNew") == .credentials)
        #expect(Broadcast.AnswerClass(status: 429, reason: "TooManyRequests") == .transient)
        #expect(Broadcast.AnswerClass(status: 503, reason: APNsReason(name: "Service Unavailable")) == .transient)
        #expect(APNsReason(name: "Service Unavailable") == .serviceUnavailable)
        #expect(Broadcast.AnswerClass(status: 502, reason: nil) == .transient)
        #expect(Broadcast.AnswerClass(status: 400, reason: "Whatever") == .requestWrong)
    }
}

extension BroadcastTests {
    @Test func writingInPlaceMatchesEncoding() {
        for count in 0...40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 89 &+ 7) }
            var room = [UInt8](repeating: 0, count: Base64.encodedCount(count))
            let n = bytes.withUnsafeBufferPointer { b in room.withUnsafeMutableBufferPointer { Base64.write(b, to: $0) } }
            #expect(n == room.count && room == Base64.encode(bytes))
        }
    }
}
