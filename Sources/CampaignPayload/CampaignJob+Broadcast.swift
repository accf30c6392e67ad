import APNSWire
import CampaignJSON

/// A broadcast job (`"broadcast": true`): its audience is a list of Live
/// Activity channels, and each record is one `POST /4/broadcasts/apps/<bundle
/// id>` that APNs fans out to every device on the channel
/// (`../shared/reference/apns-broadcast.md` §2).
///
/// ```json
/// {"campaign": "match-night", "format": "h2", "broadcast": true, "pushType": "liveactivity",
///  "topic": "com.example.scores",
///  "messages": {"en": {"event": "update", "timestamp": "{now:int}",
///                      "content-state": {"home": "{home_score:int}", "away": "{away_score:int}"}}}}
/// ```
extension CampaignJob {
    static let notOverHTTP2 = "\"broadcast\" goes with \"format\": \"h2\" (broadcasts exist only on the HTTP/2 provider API)"

    /// The job's `broadcast` key: false when absent; true only for Live Activities over HTTP/2.
    static func isBroadcast(_ json: JSONValue, isHTTP2: Bool, pushType: String, fail: (String) -> JobError) throws(JobError) -> Bool {
        switch json["broadcast"] {
        case nil, .bool(false)?: return false
        case .bool(true)?:
            guard isHTTP2 else { throw fail(notOverHTTP2) }
            guard pushType == Broadcast.pushType else {
                throw fail("\"broadcast\" sends Live Activity updates: it goes with \"pushType\": \"liveactivity\", not \"\(pushType)\"")
            }
            return true
        case let other?: throw fail("\"broadcast\" must be true or false, not \(other.typeName)")
        }
    }

    /// A broadcast's message: a Live Activity `update` or `end` (a broadcast
    /// cannot start one [AK]), with its dates and score as numbers.
    static func checkBroadcast(_ aps: [(key: String, value: JSONValue)], at path: String, fail: (String) -> JobError) throws(JobError) {
        for (key, value) in aps {
            switch key {
            case "event":
                if value == .string("start") {
                    throw fail("\(path).event \"start\" cannot go to a channel: a broadcast updates or ends Live Activities already running (start them with a device push, whose \"input-push-channel\" names the channel)")
                }
            case "stale-date", "dismissal-date", "relevance-score":
                switch value {
                case .number: break
                case .string(let s) where (try? Template(s))?.typedVariable.map({ $0.type != .bool }) == true: break
                default: throw fail("\(path).\(key) must be a number, or a typed variable such as \"{\(key == "relevance-score" ? "score:number" : "ends_at:int")}\"")
                }
            case "attributes-type", "attributes", "input-push-channel", "input-push-token":
                throw fail("\(path).\(key) belongs to a push that starts a Live Activity; a broadcast cannot start one")
            default: break
            }
        }
    }

    /// Rules of the whole job: the bundle id the path names, and no per-device headers.
    func checkBroadcastJob(fail: (String) -> JobError) throws(JobError) {
        guard topic != nil else {
            throw fail("a broadcast needs \"topic\": the app's bundle id, which the broadcast path names (/4/broadcasts/apps/<bundle id>)")
        }
        if collapseId != nil { throw fail("\"collapseId\" does not go with \"broadcast\": APNs documents no apns-collapse-id for broadcasts") }
        // The ledger counts notifications per device; a channel's devices are Apple's to know.
        if frequencyCap != nil {
            throw fail("\"frequencyCap\" does not go with \"broadcast\": a cap counts each device's notifications, and a channel's devices are unknown to the sender")
        }
        // ActivityKit's page gives channel updates 5 or 10; the broadcast
        // header table also lists 1, which no Live Activity update uses.
        if priority != .immediate && priority != .conservePower {
            throw fail("\"priority\" must be 10 (immediate) or 5 (conserve power) for a broadcast, not \(priority.rawValue): Apple's Live Activity updates take no other")
        }
        if maxPayload > Broadcast.maxPayloadBytes { throw fail("\"maxPayload\" must be at most \(Broadcast.maxPayloadBytes) for a broadcast") }
    }
}
