"""The chat surface: Slack and Mattermost slash commands. Imports the core, never another surface."""
