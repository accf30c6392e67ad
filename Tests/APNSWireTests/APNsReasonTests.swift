import Testing
import APNSWire

/// Reasons are values: every name in Apple's table reads as its own case and
/// writes back as it came; anything else is kept, as unknown.
@Suite struct APNsReasonTests {
    @Test func everyDocumentedReasonRoundTripsByName() {
        #expect(APNsReason.documented.count == 39, "30 for device pushes, 9 more for channels and broadcasts")
        #expect(Set(APNsReason.documented.map(\.name)).count == 39, "two cases share a name")
        for reason in APNsReason.documented {
            #expect(APNsReason(name: reason.name) == reason)
            if case .unknown = reason { Issue.record("\(reason) is documented but reads as unknown") }
        }
        #expect(APNsReason(name: "BadDeviceToken") == .badDeviceToken)
        #expect(APNsReason.tooManyProviderTokenUpdates.name == "TooManyProviderTokenUpdates")
    }

    @Test func anUndocumentedReasonIsKeptAsItCame() {
        #expect(APNsReason(name: "BadPayload") == .unknown("BadPayload"))
        #expect(APNsReason(name: "baddevicetoken") == .unknown("baddevicetoken"), "names are case-sensitive, as Apple writes them")
        #expect(APNsReason(name: "Teapot").name == "Teapot")
    }
}
