import CampaignCommands

Campaign.main()
