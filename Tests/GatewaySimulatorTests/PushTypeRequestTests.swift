import Testing
import APNSWire
@testable import GatewaySimulator

/// The simulator takes the newer push types to the topics Apple gives them
/// (reference apns-broadcast.md §4) and refuses them elsewhere, as for the older ones.
@Suite struct PushTypeRequestTests {
    static let body = #"{"aps":{"content-changed":true}}"#

    static func request(topic: String, pushType: String) -> H2Request {
        H2RequestCheckTests.request([("apns-topic", topic), ("apns-push-type", pushType), ("apns-priority", "10"), ("apns-expiration", "0")], body: body)
    }

    @Test(arguments: [("controls", "com.example.app.push-type.controls"), ("widgets", "com.example.app.push-type.widgets")])
    func controlsAndWidgetsGoToTheirSuffixedTopics(pushType: String, topic: String) {
        #expect(Self.request(topic: topic, pushType: pushType).validate(authentication: H2RequestCheckTests.cert) == nil)
        #expect(Self.request(topic: topic, pushType: pushType).validate(authentication: .token(refusal: nil)) == nil)
        #expect(Self.request(topic: "com.example.app", pushType: pushType).validate(authentication: .token(refusal: nil))
            == H2Reply(status: 400, reason: "BadTopic"), "the bare bundle id is not their topic")
        #expect(Self.request(topic: topic, pushType: "alert").validate(authentication: .token(refusal: nil))
            == H2Reply(status: 400, reason: "BadTopic"), "nor is their topic another type's")
    }
}
