"""The Slack channel (being split into a package; channels/slack/adapter.py holds it whole for now)."""

from channels.slack.adapter import SlackChannel, SlackConfig, plain_from_mrkdwn, transcript_text

__all__ = ["SlackChannel", "SlackConfig", "plain_from_mrkdwn", "transcript_text"]
