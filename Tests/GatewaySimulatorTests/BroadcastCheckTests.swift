import Testing
import APNSWire
@testable import GatewaySimulator

/// The channel and broadcast routes judge requests as the reference's §5 says, in its order.
@Suite struct ChannelRouteTests {
    @Test(arguments: [
        ("/1/apps/com.example.app/channels", ChannelRoute.channels(bundleID: "com.example.app")),
        ("/1/apps/com.example.app/all-channels", .allChannels(bundleID: "com.example.app")),
        ("/4/broadcasts/apps/com.example.app", .broadcast(bundleID: "com.example.app")),
    ])
    func theFiveRoutesAreKnown(path: String, route: ChannelRoute) {
        #expect(ChannelRoute(path: path) == route)
    }

    @Test(arguments: ["/4/broadcast/apps/com.example.app", "4/broadcasts/apps/com.example.app", "/1/apps//channels",
                      "/1/apps/com.example.app/channels/", "/1/apps/com.example.app", "/3/device/abc",
                      "/4/broadcasts/apps/com.example.app?x=1", "/1/apps/com.example.app/channels?x=1", "/2/apps/b/channels"])
    func anythingElseIsBadPath(path: String) {
        #expect(ChannelRoute(path: path) == nil)
    }

    @Test func suffixesAreTopicsNotBundleIDs() {
        #expect(ChannelRoute.hasPushTypeSuffix("com.example.app.push-type.liveactivity"))
        #expect(ChannelRoute.hasPushTypeSuffix("com.example.app.voip"))
        #expect(ChannelRoute.hasPushTypeSuffix("com.example.app.push-type.widgets"))
        #expect(!ChannelRoute.hasPushTypeSuffix("com.example.app"))
        #expect(ChannelRoute.appID("com.example.app.push-type.liveactivity") == "com.example.app")
        #expect(ChannelRoute.appID("com.example.app.push-type.controls") == "com.example.app")
    }
}

@Suite struct BroadcastCheckTests {
    static let app = "com.example.app"
    static let stored = ChannelID(bytes: Array(1...16))     // policy 1
    static let unstored = ChannelID(bytes: Array(21...36))  // policy 0
    static let unknown = ChannelID(bytes: Array(41...56))
    static let requestID = "123e4567-e89b-12d3-a456-426614174000"
    static let cert = H2Request.Authentication.certificate(topic: app)

    /// The store's answer: a live channel of `app` only.
    static func lookup(bundleID: String) -> (ChannelID) -> ChannelStore.Channel? {
        { id in bundleID == app ? channel(id) : nil }
    }

    static func channel(_ id: ChannelID) -> ChannelStore.Channel? {
        switch id {
        case stored: ChannelStore.Channel(bundleID: app, policy: .mostRecent, state: .live)
        case unstored: ChannelStore.Channel(bundleID: app, policy: .noneStored, state: .live)
        default: nil
        }
    }

    /// A broadcast as [BC]'s example writes it, with `changes` replacing or (value nil) removing headers.
    static func broadcast(bundle: String = app, method: String = "POST", _ changes: [String: String?] = [:],
                          body: String = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#) -> H2Request {
        var fields: [(String, String)] = [("apns-channel-id", stored.base64), ("apns-push-type", "liveactivity"),
                                          ("apns-priority", "10"), ("apns-expiration", "0"), ("apns-request-id", requestID)]
        for (name, value) in changes {
            fields.removeAll { $0.0 == name }
            if let value { fields.append((name, value)) }
        }
        return H2Request(headers: [(":method", method), (":path", "/4/broadcasts/apps/\(bundle)"), (":scheme", "https"),
                                   (":authority", "x")] + fields, body: Array(body.utf8))
    }

    /// Both steps, as the device listener runs them.
    static func judge(_ request: H2Request, _ authentication: H2Request.Authentication = cert,
                      disabled: Set<String> = []) -> Checked<AcceptedBroadcast> {
        switch request.checkChannelRequest(authentication: authentication, apps: BroadcastApps(disabled: disabled)) {
        case .refused(let reply): return .refused(reply)
        case .passed(let route): return request.checkBroadcast(bundleID: route.bundleID, lookup: lookup(bundleID: route.bundleID))
        }
    }

    static func refused(_ status: Int, _ reason: APNsReason) -> Checked<AcceptedBroadcast> { .refused(H2Reply(status: status, reason: reason)) }

    // Each request is wrong in its named way and in every way checked after it:
    // the first failure in §5.9's order is the answer.
    @Test(arguments: [
        (broadcast(bundle: "com.other.app", ["apns-channel-id": nil]), 403, "TopicMismatch"),
        (broadcast(bundle: "com.example.app.push-type.liveactivity", ["apns-channel-id": nil]), 400, "TopicDisallowed"),
        (broadcast(method: "GET", ["apns-channel-id": nil]), 405, "MethodNotAllowed"),
        (broadcast(["apns-request-id": "not-a-uuid", "apns-channel-id": nil]), 400, "BadMessageId"),
        (broadcast(["apns-request-id": requestID.uppercased(), "apns-channel-id": nil]), 400, "MissingChannelId"),
        (broadcast(["apns-channel-id": nil, "apns-priority": "7"]), 400, "MissingChannelId"),
        (broadcast(["apns-channel-id": "not base64!", "apns-push-type": nil]), 400, "BadChannelId"),
        (broadcast(["apns-channel-id": String(stored.base64.dropLast(2)), "apns-push-type": nil]), 400, "BadChannelId"),
        (broadcast(["apns-channel-id": ChannelID(bytes: Array(repeating: 7, count: ChannelID.maxBytes + 1)).base64]), 400, "BadChannelId"),
        (broadcast(["apns-channel-id": ChannelID(bytes: Array(repeating: 7, count: 101)).base64]), 400, "ChannelNotRegistered"),
        (broadcast(["apns-channel-id": unknown.base64, "apns-priority": "7"]), 400, "ChannelNotRegistered"),
        (broadcast(["apns-push-type": nil, "apns-priority": "7"]), 400, "MissingPushType"),
        (broadcast(["apns-push-type": "alert", "apns-priority": "7"]), 400, "InvalidPushType"),
        (broadcast(["apns-priority": "7", "apns-expiration": "soon"]), 400, "BadPriority"),
        (broadcast(["apns-priority": "+5"]), 400, "BadPriority"),
        (broadcast(["apns-expiration": "soon"], body: ""), 400, "BadExpirationDate"),
        (broadcast(["apns-expiration": "-1"]), 400, "BadExpirationDate"),
        (broadcast(["apns-channel-id": unstored.base64, "apns-expiration": "1700000000"], body: ""), 400, "BadExpirationDate"),
        (broadcast(body: ""), 400, "PayloadEmpty"),
        (broadcast(body: #"{"aps":{"x":""# + String(repeating: "x", count: 5110) + #""}}"#), 413, "PayloadTooLarge"),
        (broadcast(body: #"{"aps":"#), 400, "BadRequestPayload"),
        (broadcast(body: "[1]"), 400, "BadRequestPayload"),
    ])
    func theFirstFailureInApplesOrderWins(request: H2Request, status: Int, reason: String) {
        #expect(Self.judge(request) == Self.refused(status, APNsReason(name: reason)))
    }

    @Test func authenticationComesFirstAndTheCapabilityBeforeTheChannel() {
        let tokenRefusal = H2Reply(status: 403, reason: "ExpiredProviderToken")
        #expect(Self.judge(Self.broadcast(bundle: "com.x.push-type.liveactivity", ["apns-channel-id": nil]), .token(refusal: tokenRefusal)) == .refused(tokenRefusal))
        #expect(Self.judge(Self.broadcast(["apns-channel-id": nil]), disabled: [Self.app]) == Self.refused(400, "FeatureNotEnabled"))
        // A token may name any of the team's apps: no TopicMismatch.
        #expect(Self.judge(Self.broadcast(bundle: "com.other.app"), .token(refusal: nil)) == Self.refused(400, "ChannelNotRegistered"))
    }

    @Test func aValidBroadcastIsAcceptedWithAppleDefaultsAndAnyLetterCase() throws {
        let body = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#
        for pushType in ["liveactivity", "Liveactivity", "LiveActivity", "LIVEACTIVITY"] {
            guard case .passed(let b) = Self.judge(Self.broadcast(["apns-push-type": pushType])) else {
                Issue.record("\(pushType) refused"); continue
            }
            #expect(b.channel == Self.stored && b.priority == 10 && b.expiration == 0 && b.event == "update")
            #expect(String(decoding: b.payload.serialized(), as: UTF8.self) == body)
        }
        // §5.10: priority and expiration may be left out ([CLI]'s curl leaves out expiration).
        guard case .passed(let b) = Self.judge(Self.broadcast(["apns-priority": nil, "apns-expiration": nil, "apns-request-id": nil])) else {
            Issue.record("defaults refused"); return
        }
        #expect(b.priority == 10 && b.expiration == 0)
        // A stored channel takes an expiration; priorities 5 and 1 are Apple's; apns-topic is ignored.
        guard case .passed(let later) = Self.judge(Self.broadcast(["apns-expiration": "1900000000", "apns-priority": "1",
                                                                    "apns-topic": "com.whatever"])) else {
            Issue.record("stored channel with expiration refused"); return
        }
        #expect(later.expiration == 1_900_000_000 && later.priority == 1)
        // event start: no Apple error names it (§5.15): accepted, and flagged in the record.
        guard case .passed(let start) = Self.judge(Self.broadcast(body: #"{"aps":{"event":"start"}}"#)) else {
            Issue.record("start refused"); return
        }
        #expect(start.event == "start")
        #expect(Self.judge(Self.broadcast(body: #"{"aps":{"x":""# + String(repeating: "x", count: 5104) + #""}}"#)) != Self.refused(413, "PayloadTooLarge"),
                "5,120 bytes is within the limit")
    }

    @Test func strictModeRefusesWhatTheDefaultsWouldFillIn() {
        func strict(_ request: H2Request) -> Checked<AcceptedBroadcast> {
            request.checkBroadcast(bundleID: Self.app, strict: true, lookup: Self.lookup(bundleID: Self.app))
        }
        #expect(strict(Self.broadcast(["apns-priority": nil, "apns-expiration": nil])) == Self.refused(400, "BadPriority"))
        #expect(strict(Self.broadcast(["apns-expiration": nil])) == Self.refused(400, "BadExpirationDate"))
        guard case .passed = strict(Self.broadcast()) else { Issue.record("a full broadcast refused in strict mode"); return }
    }

    @Test func theRequestIDIsTheOneSentWhenWellFormed() {
        #expect(Self.broadcast().requestID == Self.requestID)
        #expect(Self.broadcast(["apns-request-id": nil]).requestID == nil)
        #expect(Self.broadcast(["apns-request-id": nil, "apns-id": Self.requestID.uppercased()]).requestID == Self.requestID,
                "[BC]'s token example sends apns-id: echoed lowercased")
        #expect(Self.broadcast(["apns-request-id": "nope"]).requestID == nil)
        #expect(H2Request.isCanonicalUUID(Self.requestID) && !H2Request.isCanonicalUUID(Self.requestID.uppercased()))
    }
}

@Suite struct CreateBodyTests {
    static func create(_ body: String) -> Checked<Broadcast.StoragePolicy> {
        H2Request(headers: [(":method", "POST"), (":path", "/1/apps/a/channels")], body: Array(body.utf8)).checkCreateBody()
    }

    @Test(arguments: [
        ("", "BadRequestPayload"),
        ("{", "BadRequestPayload"),
        ("[]", "BadRequestPayload"),
        (#"{"message-storage-policy":1,"push-type":"LiveActivity","colour":"red"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":1}"#, "MissingPushType"),
        (#"{"message-storage-policy":1,"push-type":"alert"}"#, "InvalidPushType"),
        (#"{"push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, "BadRequestParams"),
        (#"{"message-storage-policy":"1","push-type":"LiveActivity"}"#, "BadRequestParams"),
    ])
    func refusals(body: String, reason: String) {
        #expect(Self.create(body) == .refused(H2Reply(status: 400, reason: APNsReason(name: reason))))
    }

    @Test func applesExampleBodiesAreTaken() {
        #expect(Self.create(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#) == .passed(.mostRecent))
        #expect(Self.create(#"{"push-type":"LiveActivity","message-storage-policy":0}"#) == .passed(.noneStored))
    }
}

@Suite struct ChannelStoreTests {
    @Test func theLimitIsPerAppAndEnvironmentAndADeleteFreesAPlace() throws {
        let store = ChannelStore(limit: 3)
        var ids: [ChannelID] = []
        for _ in 0..<3 {
            guard case .created(let id) = store.create(environment: "sandbox", bundleID: "a", policy: .mostRecent) else { Issue.record("refused"); return }
            ids.append(id)
        }
        #expect(store.create(environment: "sandbox", bundleID: "a", policy: .mostRecent) == .limitReached)
        #expect(store.create(environment: "production", bundleID: "a", policy: .mostRecent) != .limitReached)
        #expect(store.create(environment: "sandbox", bundleID: "b", policy: .noneStored) != .limitReached)
        #expect(Set(ids).count == 3 && ids.allSatisfy { $0.bytes.count == ChannelStore.defaultIDBytes })
        #expect(store.list(environment: "sandbox", bundleID: "a") == ids.sorted { $0.base64 < $1.base64 })
        #expect(store.list(environment: "sandbox", bundleID: "b").count == 1)
        #expect(store.channel(environment: "production", bundleID: "a", id: ids[0]) == nil, "another environment's channel does not exist here")
        #expect(store.channel(environment: "sandbox", bundleID: "b", id: ids[0]) == nil, "another app's channel does not exist for it")
        #expect(store.delete(environment: "sandbox", bundleID: "a", id: ids[0]))
        #expect(!store.delete(environment: "sandbox", bundleID: "a", id: ids[0]))
        #expect(store.channel(environment: "sandbox", bundleID: "a", id: ids[0]) == nil)
        #expect(store.list(environment: "sandbox", bundleID: "a").count == 2)
        guard case .created(let again) = store.create(environment: "sandbox", bundleID: "a", policy: .mostRecent) else { Issue.record("refused"); return }
        #expect(!ids.contains(again))
        #expect(store.counts().created == 6 && store.counts().deleted == 1)
    }

    /// A generator that repeats itself: ids must still never be reissued, even after a delete.
    struct Repeating: RandomNumberGenerator {
        var values: [UInt64]
        var i = 0
        mutating func next() -> UInt64 {
            defer { i += 1 }
            return values[min(i, values.count - 1)]
        }
    }

    @Test func aDeletedIDIsNeverIssuedAgain() {
        // 16 draws make the first id; the next 16 repeat it, then new values follow.
        let store = ChannelStore(limit: 10, rng: Repeating(values: Array(repeating: 7, count: 32) + [9]))
        guard case .created(let first) = store.create(environment: "sandbox", bundleID: "a", policy: .mostRecent) else { Issue.record("refused"); return }
        #expect(store.delete(environment: "sandbox", bundleID: "a", id: first))
        guard case .created(let second) = store.create(environment: "sandbox", bundleID: "a", policy: .mostRecent) else { Issue.record("refused"); return }
        #expect(second != first)
    }
}
