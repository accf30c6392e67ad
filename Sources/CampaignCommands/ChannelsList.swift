import ArgumentParser
import CampaignJSON
import CampaignSend

/// `campaign channels list`: every live channel of the app in the environment.
struct ChannelsList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "Print the id of every channel of the app in the environment, one per line."
    )

    @OptionGroup var options: ChannelOptions

    @Flag(help: "Print {\"channels\":[…],\"apns-request-id\":…} instead.")
    var json = false

    func run() throws {
        try options.run("list") { client in
            let reply = try client.perform(.list)
            guard case .channels(let ids) = reply.outcome else { return }
            if json {
                printOutput(String(decoding: JSONValue.object([
                    ("channels", .array(ids.map { .string($0.base64) })),
                    ("apns-request-id", reply.requestID.map(JSONValue.string) ?? .null),
                ]).serialized(), as: UTF8.self))
            } else {
                for id in ids { printOutput(id.base64) }
            }
            printError("campaign channels list: \(ids.count) channel\(ids.count == 1 ? "" : "s")\(requestNote(reply.requestID))")
        }
    }
}
