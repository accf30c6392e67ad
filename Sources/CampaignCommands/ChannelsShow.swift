import ArgumentParser
import CampaignJSON
import CampaignSend

/// `campaign channels show ID`: a channel's storage policy and push type.
struct ChannelsShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print a channel's id, storage policy (none or most-recent) and push type on one line.",
        discussion: "A channel that does not exist in the environment (never created, deleted, or of the other environment) exits 66."
    )

    @OptionGroup var options: ChannelOptions

    @Argument(help: "The channel id, as create or list printed it.")
    var id: String

    @Flag(help: "Print {\"channel_id\":…,\"storage\":…,\"message-storage-policy\":0|1,\"push-type\":…,\"apns-request-id\":…} instead.")
    var json = false

    func run() throws {
        // The id is checked before anything is read or sent.
        let channel = try reportingErrors(as: "channels show") { try channelIDs([id])[0] }
        try options.run("show") { client in
            let reply = try client.perform(.read(channel))
            guard case .channel(let info) = reply.outcome else { return }
            if json {
                printOutput(String(decoding: JSONValue.object([
                    ("channel_id", .string(info.id.base64)), ("storage", .string(info.storage.name)),
                    ("message-storage-policy", .number(String(info.storage.rawValue))), ("push-type", .string(info.pushType)),
                    ("apns-request-id", reply.requestID.map(JSONValue.string) ?? .null),
                ]).serialized(), as: UTF8.self))
            } else {
                printOutput("\(info.id) \(info.storage.name) \(info.pushType)")
            }
            printError("campaign channels show: read \(info.id)\(requestNote(reply.requestID))")
        }
    }
}
